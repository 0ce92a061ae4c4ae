#!/usr/bin/env bash
# Preemption under mpirun: SIGUSR1 to a single rank makes all ranks agree at the next step
# boundary, write a checkpoint and exit with 75; the rerun resumes from it and ends with a
# loss trajectory bit-identical to an uninterrupted run. The batch-shell side
# (jobscripts/lib/preemptible.sh) forwards the signal to its step and requeues on 75.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 60000 > /dev/null || fail "demo corpus"
train() {  # train OUTPUT_DIR [args...]
  local output=$1
  shift
  "$MPIEXEC" -np 2 "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32 \
    --set training.train_micro_batch_size_per_gpu=2 --set training.max_steps=14 --set checkpoint.every_steps=0 \
    --set training.output_dir="$output" "$@"
}
train "$tmp/full" > "$tmp/full.log" 2>&1 || fail "uninterrupted run: $(tail -20 "$tmp/full.log")"

train "$tmp/preempted" > "$tmp/preempted.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do
  grep -q "Step 3/14" "$tmp/preempted.log" 2>/dev/null && break
  sleep 0.05
done
# One rank only, as when a signal reaches a single node first.
rank_pid=$(pgrep -f -- "training.output_dir=$tmp/preempted" | grep -v "^$launcher$" | tail -1)
[[ -n $rank_pid ]] || fail "no rank process found"
kill -USR1 "$rank_pid"
wait "$launcher"
code=$?
[[ $code == 75 ]] || fail "a preempted run must exit with 75, got $code: $(tail -20 "$tmp/preempted.log")"
log=$(cat "$tmp/preempted.log")
expect_contains "$log" "signal 10 (User defined signal 1) received: saving a checkpoint at step" "preemption message"
step=$(sed -nE 's/.*saving a checkpoint at step ([0-9]+) and stopping.*/\1/p' "$tmp/preempted.log")
((step >= 3 && step < 14)) || fail "stopped at step '$step'"
[[ -f $tmp/preempted/checkpoints/$(printf 'step_%08d' "$step")/DONE ]] || fail "no checkpoint at step $step"

train "$tmp/preempted" > "$tmp/resumed.log" 2>&1 || fail "resumed run: $(tail -20 "$tmp/resumed.log")"
expect_contains "$(cat "$tmp/resumed.log")" "resumed from" "resume after preemption"
"$SO_PYTHON" - "$tmp/full/metrics.h5" "$tmp/preempted/metrics.h5" <<'PY' || fail "the preempted run's losses differ"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["train/loss"][...] for p in sys.argv[1:3])
assert a.shape == b.shape == (14,), (a.shape, b.shape)
assert np.array_equal(a, b), f"{a}\n{b}"
print("final loss", b[-1], "equal to the uninterrupted run")
PY

# The batch-shell side: the signal reaches the shell, is forwarded to the step, and 75 ends in
# a requeue request (scontrol is stubbed here; tests/slurm runs the real one).
mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "scontrol $*" >> "%s/scontrol.log"\n' "$tmp" > "$tmp/bin/scontrol"
chmod +x "$tmp/bin/scontrol"
cat > "$tmp/step.sh" <<'STEP'
trap 'exit 75' USR1
for i in $(seq 100); do sleep 0.1; done
exit 0
STEP
PATH="$tmp/bin:$PATH" SLURM_JOB_ID=4242 bash -c "source jobscripts/lib/preemptible.sh; run_preemptible bash $tmp/step.sh" \
  > "$tmp/shell.log" 2>&1 &
shell=$!
sleep 1
kill -USR1 "$shell"
wait "$shell"
code=$?
[[ $code == 75 ]] || fail "run_preemptible returned $code: $(cat "$tmp/shell.log")"
grep -q "scontrol requeue 4242" "$tmp/scontrol.log" 2>/dev/null || fail "no requeue: $(cat "$tmp/shell.log")"
echo "preemption: SIGUSR1 on one rank -> checkpoint at step $step, exit 75, resumed run bit-identical; shell forwards and requeues"
