#!/usr/bin/env bash
# The NVMe tier of the optimizer state ([offload] device = "nvme") on the tiny model, 2 ranks,
# many small sub-groups through 2 buffers (so that every step evicts, reads ahead and writes
# behind), clipping on:
#  1. 20 steps give losses bit-identical to device = "cpu", and the same final checkpoint;
#     the state files are removed at exit;
#  2. resuming into the NVMe tier from the cpu run's step-10 checkpoint continues its losses
#     bit for bit (and a checkpoint of an NVMe run is the ordinary format: step 1 compares it);
#  3. a missing nvme_path, a file, and a tmpfs (host memory; older kernels also refuse it
#     O_DIRECT) are refused at start-up with the path named; a drive too small is refused
#     naming the size (when a small ext4 can be mounted here).
# The tier needs O_DIRECT: the runs use a directory under the build tree (or /var/tmp); on a
# machine where neither supports it the test is skipped (exit 77) with a message.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

o_direct_ok() {
  "$SO_PYTHON" - "$1" <<'PY'
import os, sys
path = os.path.join(sys.argv[1], ".o_direct_probe")
try:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
    os.close(fd)
    os.unlink(path)
except OSError:
    sys.exit(1)
PY
}
nvme=""
for candidate in "$SO_BUILD_DIR" /var/tmp "$tmp"; do
  dir=$(mktemp -d "$candidate/so_nvme.XXXXXX" 2>/dev/null) || continue
  if o_direct_ok "$dir"; then nvme=$dir; break; fi
  rm -rf "$dir"
done
if [[ -z $nvme ]]; then
  echo "SKIP: no directory here supports O_DIRECT (tried the build tree, /var/tmp, $tmp)"
  exit 77
fi
mounts=()
cleanup_nvme() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
  rm -rf "$nvme"
}
trap 'cleanup_nvme; rm -rf "$tmp"' EXIT

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 40000 > /dev/null || fail "demo corpus"
run() {  # run OUTPUT_DIR [args...]
  local output=$1
  shift
  "$MPIEXEC" -np 2 --oversubscribe "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" \
    --set data.seq_len=32 --set training.max_steps=20 --set training.gradient_clipping=0.5 \
    --set zero.sub_group_size=20000 --set checkpoint.every_steps=10 --set checkpoint.keep_last=5 \
    --set metrics.flush_every_steps=1 --set training.output_dir="$output" "$@"
}

# ---- 1. cpu and nvme: identical -----------------------------------------------------------------
run "$tmp/cpu" > "$tmp/cpu.log" 2>&1 || fail "cpu run: $(tail -20 "$tmp/cpu.log")"
run "$tmp/nvme" --set offload.device=nvme --set offload.nvme_path="$nvme" --set offload.buffer_count=2 \
  > "$tmp/nvme.log" 2>&1 || fail "nvme run: $(tail -20 "$tmp/nvme.log")"
expect_contains "$(cat "$tmp/nvme.log")" "state on NVMe in $nvme/superoffload_optimizer_rank0." "the tier is described"
[[ -z $(ls "$nvme") ]] || fail "state files left behind: $(ls "$nvme")"
"$SO_PYTHON" - "$tmp/cpu" "$tmp/nvme" <<'PY' || fail "the NVMe run differs from the cpu run"
import json, sys, h5py, numpy as np
cpu, nvme = sys.argv[1:3]
a, b = (h5py.File(f"{d}/metrics.h5", "r") for d in (cpu, nvme))
assert a["train/step"].shape[0] == 20, a["train/step"][...]
assert np.array_equal(a["train/loss"][...], b["train/loss"][...]), (a["train/loss"][...], b["train/loss"][...])
assert np.array_equal(a["train/grad_norm"][...], b["train/grad_norm"][...])
assert a["train/replayed"][...].sum() > 0, "no step clipped: the rollback path was not exercised"
for rank in range(2):
    x = h5py.File(f"{cpu}/checkpoints/step_00000020/rank_{rank:05d}.h5", "r")
    y = h5py.File(f"{nvme}/checkpoints/step_00000020/rank_{rank:05d}.h5", "r")
    for name in ("master", "exp_avg", "exp_avg_sq"):
        for layer in x["layers"]:
            assert np.array_equal(x[f"layers/{layer}/{name}"][...], y[f"layers/{layer}/{name}"][...]), (rank, layer, name)
print("20 losses and the step-20 state bit-identical; clipped steps replayed:", int(a["train/replayed"][...].sum()))
PY

# ---- 2. resume into the NVMe tier ---------------------------------------------------------------
run "$tmp/resumed" --set offload.device=nvme --set offload.nvme_path="$nvme" --set offload.buffer_count=2 \
  --resume "$tmp/cpu/checkpoints/step_00000010" > "$tmp/resumed.log" 2>&1 || fail "resume: $(tail -20 "$tmp/resumed.log")"
expect_contains "$(cat "$tmp/resumed.log")" "resumed from $tmp/cpu/checkpoints/step_00000010: step 10" "resumed"
"$SO_PYTHON" - "$tmp/cpu/metrics.h5" "$tmp/resumed/metrics.h5" <<'PY' || fail "the resumed NVMe run differs"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
assert list(b["train/step"][...]) == list(range(11, 21)), b["train/step"][...]
assert np.array_equal(a["train/loss"][10:], b["train/loss"][...]), (a["train/loss"][10:], b["train/loss"][...])
print("steps 11-20 after resuming into the NVMe tier: bit-identical")
PY

# ---- 3. bad nvme_path ---------------------------------------------------------------------------
refused() {  # refused NAME EXPECTED PATH
  train_tiny "$tmp/bad-$1" --set training.max_steps=2 --set offload.device=nvme --set offload.nvme_path="$3"
  ((rc != 0)) || fail "$1: accepted"
  expect_contains "$log" "$2" "$1"
}
refused missing "[offload] nvme_path = \"$tmp/nowhere\" is not an existing directory" "$tmp/nowhere"
touch "$tmp/a-file"
refused file "[offload] nvme_path = \"$tmp/a-file\" is not an existing directory" "$tmp/a-file"
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]]; then
  mkdir -p /dev/shm/so_nvme_$$
  refused tmpfs "is on a tmpfs (host memory), not a drive" "/dev/shm/so_nvme_$$"
  rm -rf /dev/shm/so_nvme_$$
else
  echo "note: /dev/shm is not a tmpfs here; the O_DIRECT case is not run"
fi
train_tiny "$tmp/bad-none" --set training.max_steps=2 --set offload.device=nvme
((rc != 0)) || fail "nvme without nvme_path accepted"
expect_contains "$log" "needs nvme_path" "nvme_path required"
# A drive too small: a 2 MiB ext4 image, when this machine lets us mount one.
if truncate -s 2M "$tmp/small.img" && mkfs.ext4 -q -F "$tmp/small.img" 2>/dev/null && mkdir -p "$tmp/small" &&
  mount -o loop "$tmp/small.img" "$tmp/small" 2>/dev/null; then
  mounts+=("$tmp/small")
  refused full "cannot reserve" "$tmp/small"
  expect_contains "$log" "No space left on device" "full: the reason"
else
  echo "note: cannot mount a small ext4 here (needs loop devices): the full-drive case is not run"
fi
echo "NVMe tier: bit-identical to cpu over 20 steps at 2 ranks, resumes exactly, bad paths refused"
