#!/usr/bin/env bash
# [offload] optimizer_state_dtype = "bf16" trains as well as fp32 moments: the tiny demo
# (configs/tiny.toml, 2 ranks, 100 steps, the demo corpus) at seq_len 64 (half the demo's, to
# halve the test's time: they end 0.1% apart there, 0.3% at 128) ends within 2% of fp32's loss, on
# the last step and on the mean of the last 10 (the demo's lr 1e-3: at 3e-3 the trajectory
# is chaotic — two fp32 runs that differ only at round-off (speculation on or off) end 4-5%
# apart — so no comparison there can be that tight). A checkpoint written with fp32 moments
# resumes into a bf16-moment run, saying so.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" > /dev/null || fail "demo corpus"
losses() {  # losses <output_dir>: "<last step's loss> <mean of the last 10>", from metrics.h5
  "$SO_PYTHON" -c 'import sys, h5py; l = h5py.File(sys.argv[1], "r")["train/loss"][-10:]; print(l[-1], sum(l) / len(l))' \
    "$1/metrics.h5"
}
run() {  # run <output_dir> <dtype> [more --set …]
  local dir=$1 dtype=$2
  shift 2
  "$MPIEXEC" -np 2 "$SO_BIN" train configs/tiny.toml --set training.output_dir="$dir" \
    --set data.path="$tmp/corpus.jsonl" --set data.seq_len=64 --set offload.optimizer_state_dtype="$dtype" "$@" 2>&1
}
fp32=$(run "$tmp/fp32" fp32) || fail "fp32 run exited $?: $fp32"
bf16=$(run "$tmp/bf16" bf16) || fail "bf16 run exited $?: $bf16"
expect_contains "$bf16" "bf16 moments" "the optimizer line names the moment storage"
a=$(losses "$tmp/fp32") || fail "reading $tmp/fp32/metrics.h5"
b=$(losses "$tmp/bf16") || fail "reading $tmp/bf16/metrics.h5"
awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " ")
  for (i = 1; i <= 2; ++i) { d = (y[i] - x[i]) / x[i]; if (d < 0) d = -d; if (d > 0.02) exit 1 } }' ||
  fail "with bf16 moments the loss (last step, mean of the last 10: $b) is not within 2% of fp32's ($a)"

grep -rqE --include=manifest.json '"optimizer_state_dtype": ?"fp32"' "$tmp/fp32/checkpoints" ||
  fail "the checkpoint does not record the moment dtype"
resumed=$(run "$tmp/fp32" bf16 --set training.max_steps=102) || fail "resume into bf16 moments exited $?: $resumed"
expect_contains "$resumed" 'optimizer_state_dtype = "fp32"; its moments are converted to bf16' "conversion on resume"
expect_contains "$resumed" "Step 102/102" "the resumed run trains"
echo "loss at step 100 and mean of steps 91-100: fp32 moments $a, bf16 moments $b; fp32 checkpoint resumed with bf16 moments"
