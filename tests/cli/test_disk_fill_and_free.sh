#!/usr/bin/env bash
# A disk that fills and frees again at chosen moments of checkpoint saves (#21, #32): on a small
# tmpfs, 2 ranks save every step with keep_last = 1. A gate loaded with LD_PRELOAD (save_gate.c)
# holds rank 0 at the moment the test names — A: its rank file being written; B: every rank
# file in place, the manifest not yet — while the test fills every byte of free space; then it
# lets that write go on into the full disk (a real ENOSPC) and frees the space once it has
# returned. No timing decides which save is hit. What a failed save means (README, [checkpoint]
# max_failed_saves):
#   - by default the job ends, with a message naming ENOSPC and what 'latest' still names;
#     nothing of the failed save is left, `latest` verifies (when there is one) and a resumed
#     run continues from it (its saves read back from the drive) to the end;
#   - with max_failed_saves = N, up to N periodic saves in a row fail with an error in the log
#     and training goes on; the next save succeeds; one more in a row ends the job; a run
#     whose last save failed never ends as if it were saved.
# Needs mount(2) (root); without it the test is skipped (exit 77) with a message.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"
[[ -n ${SO_SAVE_GATE:-} && -f $SO_SAVE_GATE ]] || fail "SO_SAVE_GATE (the LD_PRELOAD gate) is not built: '${SO_SAVE_GATE:-}'"

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

# sabotage GATE...: strikes each gate (STEP_DIR.MOMENT) once rank 0 holds there: fills the disk,
# lets the held write go on into it, and frees the space as soon as that write has returned
# (before any later save can begin: no timing decides what else fails).
sabotage() {
  local left=("$@") gate
  while ((${#left[@]})); do
    for gate in "${left[@]}"; do
      [[ -e $gates/$gate.reached ]] || continue
      # Every byte: written until ENOSPC (a fallocate of the free space measured a moment
      # earlier fails whole when the other rank's writes take some of it meanwhile).
      cat /dev/zero > "$mnt/fill" 2>/dev/null
      echo "filled the disk at $gate ($(df -B1 --output=avail "$mnt" | tail -1 | tr -d ' ') bytes free)" >> "$gates/sabotage.log"
      touch "$gates/$gate.go"
      for ((i = 0; i < 2000; i++)); do [[ -e $gates/$gate.done ]] && break; sleep 0.01; done
      rm -f "$mnt/fill"
      left=("${left[@]/$gate/}")
      local rest=()
      for g in "${left[@]}"; do [[ -n $g ]] && rest+=("$g"); done
      left=("${rest[@]}")
    done
    sleep 0.01
  done
}

# run_with_faults NAME MAX_STEPS "GATE..." [--set ...]: trains into $mnt/NAME with the saboteur
# striking the gates; sets $out, $rc, $run. Fails unless every gate was struck.
run_with_faults() {
  local name=$1 steps=$2 strikes=$3
  shift 3
  run=$mnt/$name
  gates=$tmp/gates-$name
  mkdir -p "$gates"
  sabotage $strikes &
  saboteur=$!
  local spec=${strikes// /,}
  spec=${spec//./:}
  local start=$SECONDS
  out=$(timeout 300 "$MPIEXEC" -np 2 --oversubscribe -x LD_PRELOAD="$SO_SAVE_GATE" -x SO_SAVE_GATES="$spec" \
        -x SO_SAVE_GATE_DIR="$gates" "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" \
        --set data.seq_len=32 --set training.output_dir="$run" --set training.max_steps="$steps" \
        --set checkpoint.every_steps=1 --set checkpoint.keep_last=1 --set runtime.collective_timeout_s=60 "$@" 2>&1)
  rc=$?
  kill "$saboteur" 2>/dev/null
  wait "$saboteur" 2>/dev/null
  saboteur=
  rm -f "$mnt/fill"
  ((rc != 124 && rc < 128)) || fail "$name: ended by a signal or a hang: exit $rc after $((SECONDS - start)) s: $(tail -20 <<<"$out")"
  local struck
  struck=$(grep -c "filled the disk" "$gates/sabotage.log" 2>/dev/null)
  [[ $struck == $(wc -w <<<"$strikes") ]] || fail "$name: the saboteur struck ${struck:-0} of the gates $strikes: $(tail -5 <<<"$out")"
  echo "$name: $(cat "$gates/sabotage.log" | tr '\n' ' ')-> exit $rc after $((SECONDS - start)) s, $(grep -c "checkpoint saved" <<<"$out") save(s) logged"
}

# expect_latest STEP_DIR: `latest` names it and it verifies; every directory under checkpoints/
# verifies (keep_last = 1 and failed saves leave nothing behind, so there is one).
expect_latest() {
  local latest
  latest=$(cat "$run/checkpoints/latest" 2>/dev/null) || fail "no latest: $(ls -R "$run/checkpoints" 2>&1)"
  [[ $latest == "$1" ]] || fail "latest names '$latest', expected $1: $(ls "$run/checkpoints")"
  for dir in "$run"/checkpoints/step_*; do
    [[ $(basename "$dir") == "$1" ]] || fail "$(basename "$dir") left under checkpoints/ beside $1"
  done
  "$SO_BIN" inspect "$run/checkpoints/$latest" > "$tmp/inspect.log" 2>&1 || fail "$latest does not verify: $(cat "$tmp/inspect.log")"
}

# 1. The first save fails while rank files are written; by default the job ends. There is no
#    checkpoint, and nothing claims to be one.
run_with_faults first 8 "step_00000001.A"
((rc != 0)) || fail "first: a failed save (max_failed_saves = 0) did not end the job: $(tail -5 <<<"$out")"
expect_contains "$out" "No space left on device" "first: a failed save says why"
expect_contains "$out" "'latest' still names no checkpoint" "first: what a resume would use"
[[ ! -e $run/checkpoints/latest ]] || fail "first: latest exists: $(cat "$run/checkpoints/latest")"
[[ -z $(ls -A "$run/checkpoints" 2>/dev/null) ]] || fail "first: leftovers: $(ls -R "$run/checkpoints")"

rm -rf "$run"

# 2. A middle save fails after every rank file is in place, before the manifest: the job ends,
#    step 3 stays latest, and the job resumes from it to the end.
run_with_faults middle 8 "step_00000004.B"
((rc != 0)) || fail "middle: a failed save did not end the job"
expect_contains "$out" "manifest.json.tmp: write failed: No space left on device" "middle: what failed"
expect_contains "$out" "'latest' still names $run/checkpoints/step_00000003" "middle: what a resume would use"
expect_latest step_00000003
out=$(timeout 300 "$MPIEXEC" -np 2 --oversubscribe "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" \
      --set data.seq_len=32 --set training.output_dir="$run" --set training.max_steps=10 --set checkpoint.every_steps=1 \
      --set checkpoint.keep_last=1 --set checkpoint.verify_from_disk=true --resume latest 2>&1) ||
  fail "resuming from step_00000003: $(tail -20 <<<"$out")"
expect_contains "$out" "resumed from $run/checkpoints/step_00000003" "the resume starts at step 3"
expect_contains "$out" "Step 10/10" "the resumed run reaches the end"
expect_latest step_00000010
"$SO_PYTHON" - "$run/metrics.h5" <<'PY' || fail "metrics.h5 unreadable"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    steps = list(f["train/step"][...])
    assert steps and steps[-1] == 10, steps
PY

rm -rf "$run"

# 3. max_failed_saves = 2: the first save (A), then two in a row (B, A) fail; training goes on,
#    each failure is an error in the log, and the run ends saved.
run_with_faults tolerated 8 "step_00000001.A step_00000004.B step_00000005.A" --set checkpoint.max_failed_saves=2
((rc == 0)) || fail "tolerated: exit $rc: $(tail -20 <<<"$out")"
for step in 1 4 5; do
  expect_contains "$out" "checkpoint $run/checkpoints/step_0000000$step could not be written" "tolerated: step $step's failure is logged"
done
expect_contains "$out" "failed save 2 in a row of the 2 that [checkpoint] max_failed_saves allows" "tolerated: the count"
expect_contains "$out" "checkpoints are saved again after 2 failed save(s)" "tolerated: the recovery"
expect_contains "$out" "Step 8/8" "tolerated: the run reaches the end"
expect_latest step_00000008

rm -rf "$run"

# 4. max_failed_saves = 1 and two in a row: the job ends at the second, step 1 stays latest.
run_with_faults in_a_row 8 "step_00000002.B step_00000003.A" --set checkpoint.max_failed_saves=1
((rc != 0)) || fail "in_a_row: two failed saves in a row with max_failed_saves = 1 did not end the job"
expect_contains "$out" "2 saves in a row failed" "in_a_row: why the job ended"
expect_latest step_00000001

rm -rf "$run"

# 5. The last periodic save fails (tolerated) and the save at the end writes the final state;
#    without save_on_exit a run whose last save failed ends with an error, not as if saved.
run_with_faults last_retried 4 "step_00000003.A" --set checkpoint.max_failed_saves=1 --set checkpoint.every_steps=3
((rc == 0)) || fail "last_retried: exit $rc: $(tail -20 <<<"$out")"
expect_latest step_00000004
rm -rf "$run"
run_with_faults last_lost 4 "step_00000004.A" --set checkpoint.max_failed_saves=1 --set checkpoint.save_on_exit=false
((rc != 0)) || fail "last_lost: a run whose last save failed ended with exit 0"
expect_contains "$out" "training ended, but its state is not saved" "last_lost: the reason"
expect_latest step_00000003
echo "disk fill and free: every struck save had the outcome max_failed_saves gives it"
