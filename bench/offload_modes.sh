#!/usr/bin/env bash
# Optimizer placement: SuperOffload (CPU AdamW speculated during backward, `ratio` of the
# sub-groups on the CPU) with speculation "auto" and "always", the ZeRO-Offload mode (whole
# optimizer on the CPU after backward) and the optimizer on the device (offload.device =
# "none", the baseline), each timed by `superoffload train`'s summary (warm-up steps left
# out) in the same run. Prints every mode's mean step time, its ratio to the baseline and to
# the ZeRO-Offload mode. Meant for a GPU node; on a CPU-only machine pass a small model
# (--hidden 256 --layers 4 --seq 128 --bf16 false: LibTorch's bf16 matmuls are emulated, and
# slow, on CPUs without bf16 instructions).
#
#   bench/offload_modes.sh [--hidden 2560] [--layers 24] [--seq 2048] [--micro 4] [--clip 0|X|both|p90]
#                          [--steps 4] [--ranks 1] [--bf16 true] [--build build]
#                          [--modes device,auto,always,zerooffload]
# --modes: a subset of the rows, for a short session (a row not run shows "not run", and ratios
# to it are left out).
# --clip: the gradient-clipping threshold for every mode; with random initialisation every
# step clips (norms of 20-50), so 1.0 measures the clipped path (redo, or steps left late)
# and 0 the overlap; `both` runs 0 and 1.0 and prints both tables. `p90`: the regime of
# fine-tuning from pretrained weights, where few steps clip (DeepSpeed saw 93 rollbacks in
# 79,000 steps of BLOOM-176B): the threshold 90% of the steps stay under, the 90th percentile of
# the gradient norms of a run with the optimizer on the device and no clipping (same model,
# data and seed: every mode's norms are those to round-off). Each table says how many steps
# clipped in each mode.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
hidden=2560 layers=24 seq=2048 micro=4 clip=0 steps=4 ranks=1 bf16=true build=$here/build
modes=device,auto,always,zerooffload
while (($#)); do
  case $1 in
    --hidden) hidden=$2 ;; --layers) layers=$2 ;; --seq) seq=$2 ;; --micro) micro=$2 ;;
    --clip) clip=$2 ;; --steps) steps=$2 ;; --ranks) ranks=$2 ;; --bf16) bf16=$2 ;; --build) build=$2 ;;
    --modes) modes=$2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "offload_modes.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift 2
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$here/bench/scaled_llama.sh"
scaled_llama "$work" "$hidden" "$layers" "$seq" $((seq * micro * ranks * (steps + 3) * 2)) "$build"

mean_step() {  # mean_step NAME CLIP [--set ...]: prints the summary's mean step time in ms
  local name=$1 clip=$2
  shift 2
  mpirun -np "$ranks" --bind-to none "$build/bin/superoffload" train "$here/configs/tiny.toml" \
    --set model.path="$work" --set data.path="$work/corpus.jsonl" --set data.seq_len="$seq" \
    --set training.train_micro_batch_size_per_gpu="$micro" --set training.gradient_clipping="$clip" \
    --set precision.bf16="$bf16" --set training.output_dir="$work/$name" --set checkpoint.every_steps=0 \
    --set checkpoint.save_on_exit=false --set training.timing_warmup_steps=2 --set training.bench_steps="$steps" \
    --set offload.cpuadam_cores_perc=0.9 --set metrics.wall_clock_breakdown=true --set runtime.device=auto "$@" \
    > "$work/$name.log" 2>&1 ||
    { echo "$name failed:" >&2; tail -20 "$work/$name.log" >&2; exit 1; }
  grep "time breakdown" "$work/$name.log" | tail -1 | sed "s/.*time breakdown/  $name: last step breakdown/" >&2
  sed -nE 's/.*mean step ([0-9.]+) ms.*/\1/p' "$work/$name.log"
}
norms_of() { sed -nE 's/.*\| Grad norm ([0-9.e+-]+) \|.*/\1/p' "$work/$1.log"; }
clipped_of() {  # clipped_of NAME CLIP: "K of N"
  norms_of "$1" | awk -v c="$2" '{ n++; if (c > 0 && $1 > c) k++ } END { printf "%d of %d", k, n }'
}
table() {  # table CLIP
  local clip=$1
  wanted() { [[ ,$modes, == *,$1,* ]]; }
  local baseline=nan auto=nan always=nan zero=nan
  # (if, not &&: a failed run must end the script under set -e)
  if wanted device; then baseline=$(mean_step "device_clip$clip" "$clip" --set offload.device=none); fi
  if wanted auto; then auto=$(mean_step "auto_clip$clip" "$clip" --set offload.speculation=auto); fi
  if wanted always; then always=$(mean_step "always_clip$clip" "$clip" --set offload.speculation=always); fi
  if wanted zerooffload; then
    zero=$(mean_step "zerooffload_clip$clip" "$clip" --set offload.super_offload=false --set offload.ratio=1.0)
  fi
  params=$(sed -nE 's/.*training ([0-9.]+M) parameters.*/\1/p' "$work"/*_clip"$clip".log | head -1)
  printf '\nmodel %s parameters, seq %s x micro-batch %s, %s rank(s), gradient_clipping %s\n' "$params" "$seq" "$micro" \
    "$ranks" "$clip"
  awk -v b="$baseline" -v a="$auto" -v s="$always" -v z="$zero" '
    function row(name, t, extra) {
      if (t == "nan") { printf "  %-34s  not run\n", name; return }
      printf "  %-34s %9.1f ms/step%s\n", name, t, extra }
    function ratios(t) {
      out = ""
      if (t != "nan" && b != "nan") out = out sprintf("  %.2fx the baseline", t / b)
      if (t != "nan" && z != "nan") out = out sprintf("%s%.2fx ZeRO-Offload'"'"'s time", out == "" ? "  " : ", ", t / z)
      return out }
    BEGIN {
      row("optimizer on the device (baseline)", b, "")
      row("SuperOffload, speculation auto", a, ratios(a))
      row("SuperOffload, speculation always", s, ratios(s))
      row("ZeRO-Offload (after backward)", z, (z != "nan" && b != "nan") ? sprintf("  %.2fx the baseline", z / b) : "") }'
  local clipped="" mode
  for mode in device auto always zerooffload; do
    [[ -f $work/${mode}_clip$clip.log ]] && clipped+="${clipped:+, }$mode $(clipped_of "${mode}_clip$clip" "$clip")"
  done
  printf '  steps clipped (warm-up included): %s\n' "$clipped"
}
if [[ $clip == p90 ]]; then
  mean_step probe 0 --set offload.device=none > /dev/null
  clip=$(norms_of probe | sort -g | awk '{ v[n++] = $1 } END {
    if (n == 0) exit 1
    at = 0.9 * (n - 1); i = int(at); printf "%.6g", (i + 1 < n) ? v[i] + (at - i) * (v[i + 1] - v[i]) : v[i] }') ||
    { echo "offload_modes.sh: the probe run printed no gradient norms" >&2; exit 1; }
  printf '\ngradient norms of the probe (optimizer on the device, no clipping): %s; 90th percentile %s\n' \
    "$(norms_of probe | tr '\n' ' ')" "$clip"
fi
if [[ $clip == both ]]; then
  table 0
  table 1.0
else
  table "$clip"
fi
