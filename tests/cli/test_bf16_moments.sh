#!/usr/bin/env bash
# [offload] optimizer_state_dtype = "bf16" trains as well as fp32 moments: the tiny demo
# (configs/tiny.toml, 2 ranks, 100 steps, the demo corpus) ends within 2% of fp32's final
# loss. A checkpoint written with fp32 moments resumes into a bf16-moment run, saying so.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" > /dev/null || fail "demo corpus"
final_loss() {  # the last loss of the run's summary line
  sed -nE 's/.*summary:.*loss [0-9.]+ -> ([0-9.]+);.*/\1/p' <<<"$1"
}
run() {  # run <output_dir> <dtype> [more --set …]
  local dir=$1 dtype=$2
  shift 2
  "$MPIEXEC" -np 2 "$SO_BIN" train configs/tiny.toml --set training.output_dir="$dir" \
    --set data.path="$tmp/corpus.jsonl" --set offload.optimizer_state_dtype="$dtype" "$@" 2>&1
}
fp32=$(run "$tmp/fp32" fp32) || fail "fp32 run exited $?: $fp32"
bf16=$(run "$tmp/bf16" bf16) || fail "bf16 run exited $?: $bf16"
expect_contains "$bf16" "bf16 moments" "the optimizer line names the moment storage"
a=$(final_loss "$fp32")
b=$(final_loss "$bf16")
[[ -n $a && -n $b ]] || fail "no final loss in the summaries: '$a' '$b'"
awk -v a="$a" -v b="$b" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; exit !(d <= 0.02) }' ||
  fail "final loss with bf16 moments $b is not within 2% of fp32's $a"

grep -rqE --include=manifest.json '"optimizer_state_dtype": ?"fp32"' "$tmp/fp32/checkpoints" ||
  fail "the checkpoint does not record the moment dtype"
resumed=$(run "$tmp/fp32" bf16 --set training.max_steps=102) || fail "resume into bf16 moments exited $?: $resumed"
expect_contains "$resumed" 'optimizer_state_dtype = "fp32"; its moments are converted to bf16' "conversion on resume"
expect_contains "$resumed" "Step 102/102" "the resumed run trains"
echo "final loss: fp32 moments $a, bf16 moments $b (100 steps, 2 ranks); fp32 checkpoint resumed with bf16 moments"
