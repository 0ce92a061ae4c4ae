#!/usr/bin/env bash
# The watchdog measures lack of progress, not step length: 6 ranks on this machine's cores
# (oversubscribed), 2 micro-batches per step, train steps that each take longer than
# [runtime] collective_timeout_s, and the job trains to the end, because each layer's forward
# and each layer's reduced gradient, on every micro-batch, are progress. (Before, only the last
# micro-batch's gradients were: a whole first micro-batch longer than the limit ended the job.)
# The limit is a third of a first run's step time, so the steps are longer than the limit on
# a fast machine and a slow one.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 200000 > /dev/null || fail "demo corpus"
train() {  # train OUTPUT_DIR STEPS [args...]
  local output=$1 steps=$2
  shift 2
  "$MPIEXEC" -np 6 --oversubscribe "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" \
    --set data.seq_len=256 --set training.train_micro_batch_size_per_gpu=2 --set training.gradient_accumulation_steps=2 \
    --set training.max_steps="$steps" --set training.output_dir="$output" --set checkpoint.every_steps=0 \
    --set checkpoint.save_on_exit=false "$@"
}
train "$tmp/measure" 2 > "$tmp/measure.log" 2>&1 || fail "6-rank run: $(tail -20 "$tmp/measure.log")"
step_s=$("$SO_PYTHON" -c "import sys, h5py; print(h5py.File(sys.argv[1], 'r')['train/step_time_s'][-1])" \
         "$tmp/measure/metrics.h5") || fail "no step time"
limit=$(awk -v s="$step_s" 'BEGIN { l = s / 3; printf "%.2f", l < 1 ? 1 : l }')
echo "a step takes ${step_s} s on 6 ranks here; collective_timeout_s = $limit"
train "$tmp/slow" 3 --set runtime.collective_timeout_s="$limit" > "$tmp/slow.log" 2>&1 ||
  fail "steps longer than collective_timeout_s = $limit ended the job: $(grep -E "ERROR|progress" "$tmp/slow.log" | head -5)"
"$SO_PYTHON" - "$tmp/slow/metrics.h5" "$limit" <<'PY' || fail "the steps were not longer than the limit"
import sys, h5py
times, limit = h5py.File(sys.argv[1], "r")["train/step_time_s"][...], float(sys.argv[2])
assert len(times) == 3, times
longer = sum(t > limit for t in times)
print(f"step times {', '.join(f'{t:.2f}' for t in times)} s against a limit of {limit} s")
assert longer >= 2, f"only {longer} of 3 steps were longer than the limit: the test proves nothing"
PY
echo "slow steps under 6 ranks: ok"
