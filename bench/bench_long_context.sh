#!/usr/bin/env bash
# Long-context benchmark (#50; a benchmark, not a test): peak host memory and step time of a
# Llama trained on long rows on this machine's CPU, with each long-context feature off and on:
#   none       activations kept as today (checkpointed inputs, whole-row MLP intermediates)
#   tiles      [model] tile_tokens = hidden_size (MLPs over tiles of that many tokens)
#   offload    [model] activation_offload = "host" (on a CPU: a second host buffer, copied)
#   both       offload + tiles
#   ulysses    both, and [parallel] sequence_parallel_size = 2 over 2 ranks (per-rank figures)
# Activation memory, two ways, each minus the same configuration's figure at 512 tokens (which
# holds the model, optimizer state, libraries and buffers: what does not grow with the row), per
# rank: the peak RSS (host memory: offloaded checkpoints included), and the peak of LibTorch's
# CPU allocations (/train/device_peak_bytes: what a GPU would hold on its device, offloaded
# checkpoints not included — the figure the #50 goal is about). Step time: step 2 (step 1 warms
# up). One row per micro-batch, fp32.
# The shape: SO_BENCH_SHAPE=small (default: hidden 512, MLP 2048, 4 layers, 8 heads — a CPU of 2
# cores trains it at 32k tokens in minutes) or 0.5b (hidden 1024, MLP 4096, 24 layers, 16
# heads, the issue's ~0.5B: hours per row here). SO_BENCH_SEQS overrides "8192 16384 32768".
# On a CPU "offload" copies host memory to host memory, so it frees no RSS here; what it frees is
# device memory, which the second figure counts.
#
#   bench/bench_long_context.sh [WORKDIR]    (default /tmp/bench_long_context)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-/tmp/bench_long_context}
bin=$root/build/bin/superoffload
py=$root/.venv/bin/python
[[ -x $bin ]] || { echo "build first: scripts/test or cmake --build build" >&2; exit 1; }
source "$root/scripts/mpi-env.sh"
mkdir -p "$work"
cd "$root"

source "$root/scripts/machine.sh"
machine_line

shape=${SO_BENCH_SHAPE:-small}
case $shape in
  small) dims="512 2048 4 8" ;;
  0.5b) dims="1024 4096 24 16" ;;
  *) echo "SO_BENCH_SHAPE: small or 0.5b, not $shape" >&2; exit 2 ;;
esac
read -r hidden intermediate layers heads <<< "$dims"
model=$work/model_$shape
mkdir -p "$model"
cat > "$model/config.json" <<JSON
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000, "hidden_size": $hidden,
 "intermediate_size": $intermediate, "num_hidden_layers": $layers, "num_attention_heads": $heads,
 "num_key_value_heads": $heads, "max_position_embeddings": 65536, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
 "hidden_act": "silu", "initializer_range": 0.02, "tie_word_embeddings": false, "torch_dtype": "float32"}
JSON
seqs=${SO_BENCH_SEQS:-8192 16384 32768}
longest=0
for s in $seqs; do ((s > longest)) && longest=$s; done
# Random tokens: enough rows of the longest length for 2 steps.
"$py" - "$work/rows.h5" "$longest" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["tokens"] = np.random.default_rng(0).integers(0, 32000, size=(4, int(sys.argv[2]) + 1), dtype=np.uint32)
PY

train() {  # NAME SEQ RANKS [--set ...]: one run; prints "peak_rss_bytes step_seconds"
  local name=$1 seq=$2 ranks=$3
  shift 3
  local out=$work/$name-$seq
  rm -rf "$out"
  OMP_NUM_THREADS=$(( $(nproc) / ranks )) mpirun -np "$ranks" --oversubscribe "$bin" train configs/tiny.toml \
    --set model.path=\""$model"\" --set model.init=\"random\" --set data.path=\""$work/rows.h5"\" \
    --set data.format=\"hdf5\" --set data.seq_len="$seq" --set data.shuffle=false --set precision.bf16=false \
    --set training.train_micro_batch_size_per_gpu=1 --set training.gradient_accumulation_steps=1 \
    --set training.train_batch_size=0 --set training.max_steps=2 --set training.output_dir=\""$out"\" \
    --set checkpoint.every_steps=0 --set checkpoint.save_on_exit=false --set runtime.check_memory=false \
    --set model.tile_tokens=-1 "$@" > "$out.log" 2>&1 || { echo "$name at $seq failed: $(tail -3 "$out.log")" >&2; return 1; }
  "$py" - "$out/metrics.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
print(f["ranks/host_peak_rss_bytes"][-1].max(), f["train/step_time_s"][-1], f["train/device_peak_bytes"][...].max())
PY
}

configs=(none tiles offload both ulysses)
options() {
  case $1 in
    none) echo "" ;;
    tiles) echo "--set model.tile_tokens=$hidden" ;;
    offload) echo "--set model.activation_offload=\"host\"" ;;
    both | ulysses) echo "--set model.activation_offload=\"host\" --set model.tile_tokens=$hidden" ;;
  esac
}
ranks_of() { [[ $1 == ulysses ]] && echo 2 || echo 1; }
extra_of() { [[ $1 == ulysses ]] && echo "--set parallel.sequence_parallel_size=2" || echo ""; }

declare -A base base_device
for c in "${configs[@]}"; do
  # shellcheck disable=SC2046
  result=$(train "$c-base" 512 "$(ranks_of "$c")" $(options "$c") $(extra_of "$c")) || exit 1
  read -r rss _ device <<< "$result"
  base[$c]=$rss base_device[$c]=$device
done
echo "shape $shape: hidden $hidden, MLP $intermediate, $layers layers, $heads heads; 1 row per micro-batch, fp32"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }'; }
mib_over() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", (a - b) / 1048576 }'; }
printf '%-8s %-8s %16s %9s %19s %9s %8s %9s\n' tokens config "RSS growth MiB" "vs none" "allocations MiB" "vs none" \
  "step s" "vs none"
for s in $seqs; do
  none_act=0 none_device=0 none_time=0
  for c in "${configs[@]}"; do
    # shellcheck disable=SC2046
    result=$(train "$c" "$s" "$(ranks_of "$c")" $(options "$c") $(extra_of "$c")) || exit 1
    read -r rss seconds device <<< "$result"
    act=$(mib_over "$rss" "${base[$c]}") act_device=$(mib_over "$device" "${base_device[$c]}")
    if [[ $c == none ]]; then none_act=$act none_device=$act_device none_time=$seconds; fi
    printf '%-8s %-8s %16s %9s %19s %9s %8.2f %9s\n' "$s" "$c" "$act" "$(ratio "$act" "$none_act")" "$act_device" \
      "$(ratio "$act_device" "$none_device")" "$seconds" "$(ratio "$seconds" "$none_time")"
  done
done
echo "goals (#50) at the longest row: activation memory (allocations: what a GPU's device holds) with offload"
echo "and tiles <= 1/4 of none's; step time of both <= 1.15x none's"
