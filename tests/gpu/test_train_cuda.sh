#!/usr/bin/env bash
# `superoffload train` on a GPU (label gpu; skipped where none is visible): the tiny demo
# model on one rank with NCCL and the SuperOffload optimizer (device -> host gradients, CPU
# AdamW during backward, parameters back). fp32 losses must follow the same run on the CPU
# step for step; a bf16 run must learn; a run stopped at a checkpoint and resumed must end
# where the uninterrupted one ends.
source "$(dirname "$0")/../cli/lib.sh"
cd "$SO_SOURCE_DIR"

if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIPPED: no GPU visible (nvidia-smi -L lists none)"
  exit 0
fi

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 200000 > /dev/null || fail "demo corpus"
train() {  # train NAME DEVICE [--set ...]
  local name=$1 device=$2
  shift 2
  "$MPIEXEC" -np 1 "$SO_BIN" train configs/tiny.toml --set training.output_dir="$tmp/$name" \
    --set data.path="$tmp/corpus.jsonl" --set data.seq_len=64 --set training.max_steps=20 \
    --set checkpoint.every_steps=10 --set runtime.device="$device" "$@" 2>&1
}
losses() { sed -nE 's/.*Step ([0-9]+)\/[0-9]+ \| Loss ([0-9.e+-]+).*/\1 \2/p' <<<"$1"; }

cpu=$(train cpu cpu) || fail "CPU run exited $?: $cpu"
gpu=$(train gpu cuda) || fail "GPU run exited $?: $gpu"
expect_contains "$gpu" "device cuda:0" "the GPU run's start-up line"
[[ $(losses "$gpu" | wc -l) -eq 20 ]] || fail "expected 20 step lines from the GPU run: $gpu"
# fp32 on both: only summation order differs (cuBLAS vs CPU kernels).
join <(losses "$cpu") <(losses "$gpu") | awk '
  { rel = ($2 - $3) / $2; if (rel < 0) rel = -rel; if (rel > worst) worst = rel; printf "step %s cpu %s gpu %s\n", $1, $2, $3 }
  END { printf "worst relative difference %.2e\n", worst; exit !(worst < 2e-3) }' ||
  fail "GPU losses do not follow the CPU run"

# The device peak of every step is recorded next to the plan (GPU only; NaN on the CPU), and
# the plan covers it: the tiny model's peak is far below its estimate (the runtime share aside).
"$SO_PYTHON" - "$tmp/gpu/metrics.h5" "$tmp/cpu/metrics.h5" <<'PY' || fail "device_peak_bytes"
import sys, h5py, numpy as np
gpu, cpu = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
peak = gpu["train/device_peak_bytes"][...]
planned = float(gpu.attrs["planned_device_bytes"])
assert np.isfinite(peak).all() and (peak > 0).all(), peak
assert peak.max() <= planned, (peak.max(), planned)
cpu_peak, cpu_planned = cpu["train/device_peak_bytes"][...], float(cpu.attrs["planned_device_bytes"])
assert cpu_peak.max() <= cpu_planned, (cpu_peak.max(), cpu_planned)  # LibTorch's CPU allocations
print(f"device peak {peak.max() / 2**20:.1f} MiB, planned {planned / 2**20:.1f} MiB; "
      f"on the CPU {cpu_peak.max() / 2**20:.1f} MiB, planned {cpu_planned / 2**20:.1f} MiB")
PY

bf16=$(train bf16 cuda --set precision.bf16=true) || fail "bf16 GPU run exited $?: $bf16"
first=$(losses "$bf16" | head -1 | cut -d' ' -f2) last=$(losses "$bf16" | tail -1 | cut -d' ' -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' || fail "bf16 on the GPU did not learn: $first -> $last"

# Resume on the GPU: stop after the step-10 checkpoint, continue to 20.
part=$(train resumed cuda --set training.max_steps=10) || fail "first half exited $?: $part"
rest=$("$MPIEXEC" -np 1 "$SO_BIN" train configs/tiny.toml --set training.output_dir="$tmp/resumed" \
  --set data.path="$tmp/corpus.jsonl" --set data.seq_len=64 --set training.max_steps=20 \
  --set checkpoint.every_steps=10 --set runtime.device=cuda --resume latest 2>&1) || fail "resume exited $?: $rest"
want=$(losses "$gpu" | tail -1) got=$(losses "$rest" | tail -1)
awk -v a="${want#* }" -v b="${got#* }" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d; exit !(d < 1e-4) }' ||
  fail "resumed GPU run ends at '$got', the uninterrupted one at '$want'"
echo "GPU: fp32 follows the CPU run, bf16 loss $first -> $last, resume ends at step ${got% *} loss ${got#* } (uninterrupted ${want#* })"
