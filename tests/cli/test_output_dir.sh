#!/usr/bin/env bash
# The output directory under faults:
#  - a second job on a directory in use is refused, naming the holder; once the holder is gone
#    (SIGKILL), the next job takes the lock over and trains;
#  - a read-only output directory is refused at start-up, before any step;
#  - a disk that fills during a checkpoint save (a small tmpfs, 2 ranks) ends the job with a
#    clear error and without a hang or a signal, `latest` still names the previous checkpoint,
#    which `inspect` verifies, and metrics.h5 stays readable.
# The tmpfs cases need mount(2) (root); without it they are skipped (exit 77) with a message.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

mounts=()
cleanup() {
  pkill -KILL -f -- "output_dir=$tmp/" 2>/dev/null
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
train_args=(train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32)

# ---- two jobs, one directory ---------------------------------------------------------------------
"$SO_BIN" "${train_args[@]}" --set training.output_dir="$tmp/shared" --set training.max_steps=100000 \
  > "$tmp/first.log" 2>&1 &
first=$!
for _ in $(seq 600); do
  [[ -s $tmp/shared/.superoffload.lock ]] && grep -q "Step 1/" "$tmp/first.log" && break
  sleep 0.1
done
[[ -s $tmp/shared/.superoffload.lock ]] || fail "the first job took no lock: $(tail -5 "$tmp/first.log")"
out=$("$SO_BIN" "${train_args[@]}" --set training.output_dir="$tmp/shared" --set training.max_steps=1 2>&1)
rc=$?
((rc != 0 && rc < 128)) || fail "a second job on a directory in use: exit $rc: $out"
expect_contains "$out" "output_dir $tmp/shared is in use by another job (host $(hostname), pid $first" "holder named"
expect_contains "$out" "delete $tmp/shared/.superoffload.lock" "the way out is named"
kill -0 "$first" 2>/dev/null || fail "the first job did not survive the second's attempt"
kill -KILL "$first"
wait "$first" 2>/dev/null
out=$("$SO_BIN" "${train_args[@]}" --set training.output_dir="$tmp/shared" --set training.max_steps=1 \
  --set checkpoint.auto_resume=false 2>&1) || fail "the successor of a killed job: $out"
expect_contains "$out" "taking over $tmp/shared/.superoffload.lock from a job that is gone (its process $first has ended" \
  "take-over logged"
[[ ! -e $tmp/shared/.superoffload.lock ]] || fail "the lock outlived the job that held it"

# ---- file systems that refuse writes ------------------------------------------------------------
mkdir -p "$tmp/ro" "$tmp/full"
if ! mount -t tmpfs -o size=1m,ro tmpfs "$tmp/ro" 2>/dev/null; then
  echo "SKIP: cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN): read-only and full-disk cases not run"
  exit 77
fi
mounts+=("$tmp/ro")
for dir in "$tmp/ro" "$tmp/ro/run"; do
  out=$("$SO_BIN" "${train_args[@]}" --set training.output_dir="$dir" --set training.max_steps=1 2>&1)
  rc=$?
  ((rc != 0 && rc < 128)) || fail "a read-only output_dir $dir: exit $rc: $out"
  expect_contains "$out" "[training] output_dir $dir on $(hostname) (rank 0)" "read-only: the directory is named"
  expect_contains "$out" "Read-only file system" "read-only: the reason"
  [[ $out != *"Step 1/"* ]] || fail "a step ran before the read-only directory was refused"
done

# 2 ranks, ~67 MB of checkpoint each: the first save fits, the second fills the disk.
mount -t tmpfs -o size=180m tmpfs "$tmp/full" || fail "mounting the small tmpfs"
mounts+=("$tmp/full")
start=$SECONDS
out=$(timeout 180 "$MPIEXEC" -np 2 --oversubscribe "$SO_BIN" "${train_args[@]}" --set training.output_dir="$tmp/full/run" \
  --set training.max_steps=4 --set checkpoint.every_steps=1 --set runtime.collective_timeout_s=30 2>&1)
rc=$?
((rc != 0 && rc != 124 && rc < 128)) || fail "a full disk during a save: exit $rc after $((SECONDS - start)) s: $out"
expect_contains "$out" "could not be written (rank_0000" "full disk: what failed"
expect_contains "$out" "No space left on device" "full disk: the reason"
[[ $(cat "$tmp/full/run/checkpoints/latest") == step_00000001 ]] || fail "latest moved: $(ls -R "$tmp/full/run/checkpoints")"
out=$("$SO_BIN" inspect "$tmp/full/run/checkpoints/step_00000001" 2>&1) || fail "the previous checkpoint: $out"
"$SO_PYTHON" - "$tmp/full/run/metrics.h5" <<'PY' || fail "metrics.h5 unreadable after the full disk"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    assert len(f["train/loss"]) >= 1, "no rows"
PY
echo "output directory: lock, read-only and full-disk faults handled"
