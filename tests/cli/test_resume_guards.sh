#!/usr/bin/env bash
# What a resume trusts, checked:
#  - a resume into a run with another seq_len, data file or seed is refused naming each change;
#    [checkpoint] accept_changed_settings resumes anyway with a warning;
#  - `latest` that names anything but a step directory beside it (an absolute path, ../) is
#    ignored with a note, and the newest intact checkpoint is used;
#  - a checkpoint that verifies but fails to read falls back to the one before it, and so does one
#    whose import fails on one rank of two while that rank's reading thread is ahead;
#  - a manifest whose world_size is 0 (its CRC in DONE fixed up) is refused, not exported as zeros;
#  - metrics.h5 holds every step up to the checkpoint when the job is killed, though
#    [metrics] flush_every_steps is far larger (it is flushed at each checkpoint).
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
train() {  # train OUTPUT_DIR [--set ...]
  local out=$1
  shift
  train_tiny "$out" --set checkpoint.every_steps=2 "$@"
}

train "$tmp/run" --set training.max_steps=2
((rc == 0)) || fail "training: $log"

# ---- changed settings ---------------------------------------------------------------------------
train "$tmp/run" --set training.max_steps=4 --set data.seq_len=24
((rc != 0)) || fail "a resume with another seq_len was accepted: $log"
expect_contains "$log" "belongs to a run with other settings: [data] seq_len was 32, is 24" "seq_len change named"
expect_contains "$log" "accept_changed_settings" "the override is named"
cp "$tmp/corpus.jsonl" "$tmp/corpus.orig"
head -n 20 "$tmp/corpus.orig" >> "$tmp/corpus.jsonl"
train "$tmp/run" --set training.max_steps=4 --set training.seed=7
((rc != 0)) || fail "a resume with another seed and data was accepted: $log"
expect_contains "$log" "[training] seed was 42, is 7" "seed change named"
expect_contains "$log" "the data file $tmp/corpus.jsonl held" "data change named"
cp "$tmp/corpus.orig" "$tmp/corpus.jsonl"
train "$tmp/run" --set training.max_steps=4 --set training.seed=7 --set checkpoint.accept_changed_settings=true
((rc == 0)) || fail "accept_changed_settings: $log"
expect_contains "$log" "although the run changed: [training] seed was 42, is 7" "warning"
expect_contains "$log" "resumed from $tmp/run/checkpoints/step_00000002" "resumed"

# ---- latest that points elsewhere ---------------------------------------------------------------
for target in /etc "../../run/checkpoints/step_00000002" "step_00000004/../../x"; do
  echo "$target" > "$tmp/run/checkpoints/latest"
  train "$tmp/run" --set training.max_steps=6 --set training.seed=7 --set checkpoint.save_on_exit=false \
    --set checkpoint.every_steps=0
  ((rc == 0)) || fail "latest = $target: $log"
  expect_contains "$log" "$tmp/run/checkpoints/latest does not name a step directory beside it: ignored" "latest = $target"
  expect_contains "$log" "resumed from $tmp/run/checkpoints/step_00000004" "fallback with latest = $target"
done

# ---- a checkpoint that verifies but does not read -----------------------------------------------
# A dataset renamed in the rank file, its size and CRC in DONE fixed up: verification passes,
# reading fails, and the resume falls back to the checkpoint before it.
echo step_00000004 > "$tmp/run/checkpoints/latest"
"$SO_PYTHON" - "$tmp/run/checkpoints/step_00000004" <<'PY' || fail "editing the rank file"
import json, os, sys, crc32c, h5py
directory = sys.argv[1]
with h5py.File(f"{directory}/rank_00000.h5", "r+") as f:
    f.move("layers/00001/master", "layers/00001/renamed")
data = open(f"{directory}/rank_00000.h5", "rb").read()
done = json.load(open(f"{directory}/DONE"))
done["files"]["rank_00000.h5"] = {"bytes": len(data), "crc32c": crc32c.crc32c(data)}
open(f"{directory}/DONE", "w").write(json.dumps(done))
PY
out=$("$SO_BIN" inspect "$tmp/run/checkpoints/step_00000004" 2>&1) || fail "the edited checkpoint should verify: $out"
# (step 2 was written with seed 42, step 4 with 7)
train "$tmp/run" --set training.max_steps=6 --set training.seed=7 --set checkpoint.save_on_exit=false \
  --set checkpoint.every_steps=0 --set checkpoint.accept_changed_settings=true
((rc == 0)) || fail "no fallback from a checkpoint that does not read: $log"
expect_contains "$log" "reading $tmp/run/checkpoints/step_00000004 failed (" "read failure named"
expect_contains "$log" "falling back to $tmp/run/checkpoints/step_00000002" "fallback named"
expect_contains "$log" "resumed from $tmp/run/checkpoints/step_00000002" "resumed from the older checkpoint"

# ---- an import that fails on one rank -------------------------------------------------------------
# Rank 1's import of a layer fails (as a device copy out of memory would) while its reading thread
# is ahead: the job does not hang or crash, both ranks fall back together to the checkpoint before,
# and train on from there.
two_ranks() {  # two_ranks MAX_STEPS [args...]: 2 ranks into $tmp/two; sets $rc and $log
  local steps=$1
  shift
  log=$(timeout 120 "$MPIEXEC" -np 2 --oversubscribe "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" \
    --set data.seq_len=32 --set training.output_dir="$tmp/two" --set checkpoint.every_steps=2 \
    --set training.max_steps="$steps" "$@" 2>&1)
  rc=$?
}
two_ranks 4
((rc == 0)) || fail "2-rank training: $log"
SUPEROFFLOAD_TEST_FAIL_IMPORT=1:2 two_ranks 6 --set checkpoint.save_on_exit=false --set checkpoint.every_steps=0
((rc == 0)) || fail "no fallback from an import that failed on rank 1 (rc $rc): $log"
expect_contains "$log" "reading $tmp/two/checkpoints/step_00000004 failed (rank 1: importing layer 2's exp_avg failed" "import failure named"
expect_contains "$log" "falling back to $tmp/two/checkpoints/step_00000002" "fallback named"
expect_contains "$log" "resumed from $tmp/two/checkpoints/step_00000002" "resumed from the older checkpoint"
[[ $log != *"resumed from $tmp/two/checkpoints/step_00000004"* ]] || fail "the failed checkpoint was said to be resumed from: $log"
echo "an import failing on rank 1 of 2: both ranks fell back to step 2"

# ---- manifest fields ----------------------------------------------------------------------------
"$SO_PYTHON" - "$tmp/run/checkpoints/step_00000004" <<'PY' || fail "editing the manifest"
import json, sys, crc32c
directory = sys.argv[1]
manifest = json.load(open(f"{directory}/manifest.json"))
manifest["world_size"] = 0
text = json.dumps(manifest, indent=1)
open(f"{directory}/manifest.json", "w").write(text)
done = json.load(open(f"{directory}/DONE"))
done["manifest_crc32c"] = crc32c.crc32c(text.encode())
open(f"{directory}/DONE", "w").write(json.dumps(done))
PY
out=$("$SO_BIN" inspect "$tmp/run/checkpoints/step_00000004" 2>&1)
rc=$?
((rc != 0 && rc < 128)) || fail "a manifest with world_size 0 verified: $out"
expect_contains "$out" "world_size 0 is not a rank count" "world_size named"

# ---- metrics.h5 at a crash ----------------------------------------------------------------------
"$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32 \
  --set training.output_dir="$tmp/crash" --set training.max_steps=100000 --set checkpoint.every_steps=3 \
  --set metrics.flush_every_steps=100000 > "$tmp/crash.log" 2>&1 &
job=$!
for _ in $(seq 600); do
  [[ -f $tmp/crash/checkpoints/latest ]] && break
  sleep 0.1
done
kill -KILL "$job"
wait "$job" 2>/dev/null
latest=$(cat "$tmp/crash/checkpoints/latest") || fail "no checkpoint before the kill: $(tail -5 "$tmp/crash.log")"
"$SO_PYTHON" - "$tmp/crash/metrics.h5" "${latest#step_}" <<'PY' || fail "metrics.h5 lost rows of checkpointed steps"
import sys, h5py
step = int(sys.argv[2])
with h5py.File(sys.argv[1], "r", swmr=True) as f:  # written in SWMR mode; the writer was killed
    rows = len(f["train/step"])
assert rows >= step, f"{rows} rows in metrics.h5 after a checkpoint of step {step}"
print(f"metrics.h5: {rows} rows after the checkpoint of step {step}")
PY
echo "resume guards: changed settings, stray latest, bad manifest and metrics at a crash handled"
