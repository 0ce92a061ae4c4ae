#!/usr/bin/env bash
# A disk that fills and frees again at the worst moments of a checkpoint save (#21): on a small
# tmpfs, 2 ranks save every step with keep_last = 1 while a saboteur fills every byte of free
# space the moment a save is under way — while the rank files are written (a *.partial file
# appears), or once they are written and before the manifest is (rank files renamed, no
# manifest.json yet) — and frees it 0.2 s later, so the writes after it succeed. Whatever the
# timing, no checkpoint is lost or falsely verified:
#   - the job ends without a signal or a hang, and a save that failed says why (ENOSPC);
#   - `latest` names a checkpoint that `inspect` verifies (sizes and CRCs), and nothing else
#     under checkpoints/ claims to be complete unless it verifies too;
#   - a resumed run (its saves read back from the drive) continues from it to step 10, and its
#     last checkpoint verifies; metrics.h5 is readable.
# Needs mount(2) (root); without it the test is skipped (exit 77) with a message.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

mnt=$tmp/disk
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=400m tmpfs "$mnt" 2>/dev/null; then
  echo "SKIP: cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN)"
  exit 77
fi
saboteur=
cleanup() {
  [[ -n $saboteur ]] && kill "$saboteur" 2>/dev/null
  pkill -KILL -f -- "output_dir=$mnt/" 2>/dev/null
  umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
run=$mnt/run
args=(train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32 --set training.output_dir="$run"
      --set training.max_steps=8 --set checkpoint.every_steps=1 --set checkpoint.keep_last=1
      --set runtime.collective_timeout_s=60)

# Fills the disk at moment A (rank files being written) of odd saves and moment B (written,
# manifest not yet) of even ones, once per save, and frees it 0.2 s later.
sabotage() {
  local seen="" n=0
  while :; do
    for dir in "$run"/checkpoints/step_*; do
      [[ -d $dir && $seen != *"|$dir|"* ]] || continue
      local moment=$((n % 2))
      if ((moment == 0)); then
        compgen -G "$dir/*.partial" > /dev/null || continue
      else
        compgen -G "$dir/rank_*.h5" > /dev/null && [[ ! -e $dir/manifest.json ]] || continue
      fi
      fallocate -l "$(df -B1 --output=avail "$mnt" | tail -1)" "$mnt/fill" 2>/dev/null
      echo "filled the disk at moment $([[ $moment == 0 ]] && echo A || echo B) of $(basename "$dir")" >> "$tmp/sabotage.log"
      sleep 0.2
      rm -f "$mnt/fill"
      seen+="|$dir|"
      n=$((n + 1))
    done
    sleep 0.005
  done
}
sabotage &
saboteur=$!
start=$SECONDS
out=$(timeout 300 "$MPIEXEC" -np 2 --oversubscribe "$SO_BIN" "${args[@]}" 2>&1)
rc=$?
kill "$saboteur" 2>/dev/null
wait "$saboteur" 2>/dev/null
saboteur=
rm -f "$mnt/fill"
cat "$tmp/sabotage.log" 2>/dev/null
[[ -s $tmp/sabotage.log ]] || fail "the saboteur never struck (no save seen): $(tail -5 <<<"$out")"
((rc != 124 && rc < 128)) || fail "ended by a signal or a hang: exit $rc after $((SECONDS - start)) s: $(tail -20 <<<"$out")"
if ((rc != 0)); then
  expect_contains "$out" "No space left on device" "a failed save says why"
fi
echo "training exited $rc after $((SECONDS - start)) s: $(grep -c "checkpoint saved" <<<"$out") save(s) logged"

latest=$(cat "$run/checkpoints/latest" 2>/dev/null) || fail "no latest after the faults: $(ls -R "$run/checkpoints")"
[[ $latest =~ ^step_[0-9]{8}$ ]] || fail "latest names '$latest'"
"$SO_BIN" inspect "$run/checkpoints/$latest" > "$tmp/inspect.log" 2>&1 || fail "latest ($latest) does not verify: $(cat "$tmp/inspect.log")"
# Every directory that has a manifest (claims to be complete) verifies.
for dir in "$run"/checkpoints/step_*; do
  [[ -e $dir/manifest.json ]] || continue
  "$SO_BIN" inspect "$dir" > /dev/null 2>&1 || fail "$(basename "$dir") has a manifest but does not verify"
done

# The job goes on from latest to the end, its saves read back from the drive this time
# ([checkpoint] verify_from_disk; on a tmpfs the drive is memory, but the path is the same).
out=$(timeout 300 "$MPIEXEC" -np 2 --oversubscribe "$SO_BIN" "${args[@]}" --set checkpoint.verify_from_disk=true \
      --set training.max_steps=10 --resume latest 2>&1) ||
  fail "resuming from $latest: $(tail -20 <<<"$out")"
expect_contains "$out" "Step 10/10" "the resumed run reaches the end"
[[ $(cat "$run/checkpoints/latest") == step_00000010 ]] || fail "the resumed run's saves: $(ls "$run/checkpoints")"
"$SO_BIN" inspect "$run/checkpoints/$(cat "$run/checkpoints/latest")" > /dev/null 2>&1 || fail "the resumed run's last checkpoint"
"$SO_PYTHON" - "$run/metrics.h5" <<'PY' || fail "metrics.h5 unreadable"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    steps = list(f["train/step"][...])
    assert steps and steps[-1] == 10, steps
PY
echo "disk fill and free: exit $rc, latest $latest verifies, resumed to step 10 (saves read back from the drive)"
