#!/usr/bin/env bash
# The host memory plan against every rank's measured peak resident set (#52; a benchmark, not a
# test: tests/cli/test_memory_plan_rss.sh checks the small corners in CI). For each model, at 1,
# 2 and 8 ranks, `train` (2 steps from HF safetensors) in fp32, in bf16, in bf16 with bf16 Adam
# moments, and with the optimizer state on NVMe; then `eval`, `export` (bf16, of the fp32 run's
# checkpoint) and `prepare` (a 2M-token JSONL at 1 and 2 ranks). One row each: the plan, the
# peak RSS (lowest-highest rank) and plan/peak; the goal is 0.95-1.10 everywhere. A run the
# plan says does not fit this machine is refused by `train` itself and shows as such.
#
#   bench/host_plan_matrix.sh [WORKDIR]      (default /tmp/host_plan_matrix)
#   SO_MATRIX_MODELS="tiny 125m 0.55b 1.5b"  (default "tiny 125m"; 1.5b: ~3 GB of weights, and
#                                             only its bf16/NVMe rows fit a 24 GiB machine)
#   SO_MATRIX_RANKS="1 2 8"
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-/tmp/host_plan_matrix}
bin=$root/build/bin/superoffload
py=$root/.venv/bin/python
[[ -x $bin ]] || { echo "build first: scripts/test or cmake --build build" >&2; exit 1; }
source "$root/scripts/mpi-env.sh"
source "$root/scripts/machine.sh"
mkdir -p "$work"
cd "$root"
machine_line

# name: hidden intermediate layers heads kv_heads vocabulary
declare -A shapes=([tiny]="384 1024 6 6 2 260" [125m]="768 2048 12 12 12 32000" [0.55b]="1536 4096 16 24 8 32000"
                   [1.5b]="2048 5632 32 32 4 32000")
"$root/build/bin/superoffload_demo_corpus" "$work/corpus.jsonl" --tokens 60000 > /dev/null
[[ -f $work/prepare.jsonl ]] || "$root/build/bin/superoffload_demo_corpus" "$work/prepare.jsonl" --tokens 2000000 > /dev/null
# 16 sequences of 257 tokens (ids of the byte-level tokenizer: valid in every vocabulary here).
"$py" - "$work/eval.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["tokens"] = np.random.default_rng(0).integers(0, 256, size=(16, 257), dtype=np.int64)
PY

row() {  # COMMAND MODEL RANKS VARIANT PLAN_BYTES "PEAK_BYTES..."
  "$py" - "$@" <<'PY'
import sys
command, model, ranks, variant, plan = sys.argv[1:6]
peaks = [float(p) for p in sys.argv[6].split()]
plan = float(plan)
ratios = [plan / p for p in peaks]
mark = "" if all(0.95 <= r <= 1.10 for r in ratios) else "  <- outside 0.95-1.10"
print(f"{command:8s} {model:6s} {ranks:>5s} {variant:22s} {plan / 2**20:9.0f} {min(peaks) / 2**20:9.0f}-{max(peaks) / 2**20:<9.0f} "
      f"{min(ratios):6.3f}-{max(ratios):<6.3f}{mark}")
PY
}
whole_peak() {  # OUT COMMAND...: runs COMMAND, writes the peak RSS in KiB of its largest descendant to OUT
  "$py" - "$@" <<'PY'
import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\n")
sys.exit(code)
PY
}
from_log() {  # LOG: the plan and peak of a command's "host memory:" line, in bytes
  "$py" - "$1" <<'PY'
import re, sys
line = [l for l in open(sys.argv[1]) if "host memory: peak RSS" in l][-1]
peak, plan = (float(x) * 2**30 for x in re.search(r"peak RSS ([0-9.]+) GiB, plan ([0-9.]+) GiB", line).groups())
print(plan, peak)
PY
}

echo
echo "command  model  ranks variant                 plan MiB  peak RSS MiB         plan/peak"
for name in ${SO_MATRIX_MODELS:-tiny 125m}; do
  model=$work/model_$name
  [[ -f $model/model.safetensors.index.json ]] || "$py" "$root/bench/write_llama.py" "$model" ${shapes[$name]} > /dev/null
  for ranks in ${SO_MATRIX_RANKS:-1 2 8}; do
    for variant in fp32 bf16 bf16-moments nvme; do
      out=$work/train_${name}_${ranks}_$variant
      rm -rf "$out" "$work/nvme" && mkdir -p "$work/nvme"
      extra=()
      case $variant in
        bf16) extra=(--set precision.bf16=true) ;;
        bf16-moments) extra=(--set precision.bf16=true --set offload.optimizer_state_dtype=\"bf16\") ;;
        nvme) extra=(--set offload.device=\"nvme\" --set offload.nvme_path=\""$work/nvme"\") ;;
      esac
      # The fp32 run at 1 rank keeps its checkpoint for export; where it is refused (1.5b), the
      # NVMe run at 1 rank does (the same checkpoint format, written from the NVMe tier).
      save=false
      [[ $ranks == 1 && ( $variant == fp32 || ( $variant == nvme && ! -d $work/train_${name}_1_fp32/checkpoints ) ) ]] && save=true
      if ! whole_peak "$out.kib" mpirun -np "$ranks" --oversubscribe "$bin" train configs/tiny.toml --set model.path=\""$model"\" \
          --set model.init=\"pretrained\" --set data.path=\""$work/corpus.jsonl"\" --set training.max_steps=2 \
          --set training.output_dir=\""$out"\" --set checkpoint.every_steps=0 --set checkpoint.save_on_exit=$save \
          "${extra[@]}" > "$out.log" 2>&1; then
        if grep -q "out-of-memory killer" "$out.log"; then
          printf '%-8s %-6s %5s %-22s refused: the plan does not fit this machine\n' train "$name" "$ranks" "$variant"
          continue
        fi
        echo "train $name $ranks $variant failed: $(tail -3 "$out.log")" >&2
        exit 1
      fi
      read -r plan peaks < <("$py" - "$out/metrics.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
print(float(f.attrs["planned_host_bytes"]), " ".join(str(float(x)) for x in f["ranks/host_peak_rss_bytes"][-1]))
PY
)
      row train "$name" "$ranks" "$variant" "$plan" "$peaks"
      # metrics.h5's peaks end with the last step; a run that saves on exit also gets a row for
      # the whole run, its save included (the largest rank's peak).
      if $save; then row train "$name" "$ranks" "$variant + save (whole run)" "$plan" "$(($(cat "$out.kib") * 1024))"; fi
    done
  done
  "$bin" eval --model "$model" --tokens "$work/eval.h5" > "$work/eval_$name.log" 2>&1
  read -r plan peak < <(from_log "$work/eval_$name.log")
  row eval "$name" 1 "16 x 257 tokens" "$plan" "$peak"
  for saved in fp32 nvme; do
    [[ -d $work/train_${name}_1_$saved/checkpoints ]] || continue
    rm -rf "$work/export_$name"
    "$bin" export "$work/train_${name}_1_$saved" --to "$work/export_$name" --dtype bf16 > "$work/export_$name.log" 2>&1
    read -r plan peak < <(from_log "$work/export_$name.log")
    row export "$name" 1 "bf16 (of the $saved run)" "$plan" "$peak"
    rm -rf "$work/export_$name" "$work/train_${name}_1_$saved/checkpoints"
    break
  done
done
for ranks in 1 2; do
  mpirun -np "$ranks" --oversubscribe "$bin" prepare configs/tiny.toml --set data.path=\""$work/prepare.jsonl"\" \
    -o "$work/prepared.h5" > "$work/prepare_$ranks.log" 2>&1
  read -r plan peak < <(from_log "$work/prepare_$ranks.log")
  row prepare tiny "$ranks" "2M tokens of text" "$plan" "$peak"
done
echo
echo "train: metrics.h5 planned_host_bytes against /ranks/host_peak_rss_bytes; eval, export, prepare: their"
echo "'host memory:' log line (rank 0's peak)."
