#!/usr/bin/env bash
# `superoffload train` under 2 ranks on the demo corpus (JSONL, tokenized at start-up by
# the model's byte-level tokenizer): the loss falls clearly within a
# short run, every rank writes <output_dir>/logs/rank_<N>.log tagged with its rank, only
# rank 0 talks on the console, and --log-level is honoured. The step line carries its units
# (tokens/s of the job and per device, TFLOPS per device and per job) and the summary says how
# many steps it timed, or that it timed none.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 200000 > /dev/null || fail "demo corpus"
out=$("$MPIEXEC" -np 2 "$SO_BIN" --log-level debug train configs/tiny.toml --set training.output_dir="$tmp/run" \
      --set data.path="$tmp/corpus.jsonl" --set training.max_steps=12 --set training.train_micro_batch_size_per_gpu=2 \
      --set data.seq_len=64 --set training.timing_warmup_steps=2 2>&1) || fail "train exited $?: $out"
expect_contains "$out" "rank  host" "binding table on the console"
expect_contains "$out" "Step 12/12 | Loss" "step lines"
grep -qE "Step 12/12 \| Loss [0-9]\.[0-9]{5} \| .* \| Tokens/s [0-9]+ \([0-9]+ per device\) \| TFLOPS [0-9.]+ per device, [0-9.]+ job \|" \
  <<<"$out" || fail "step line without its units or digits: $(grep "Step 12/12" <<<"$out")"
summary=$(grep "summary:" <<<"$out")
expect_contains "$summary" "over 10 timed steps (after 2 warm-up)" "the summary's timed steps"
first=$(sed -E 's/.*loss ([0-9.]+) -> ([0-9.]+);.*/\1/' <<<"$summary")
last=$(sed -E 's/.*loss ([0-9.]+) -> ([0-9.]+);.*/\2/' <<<"$summary")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' || fail "the loss did not fall clearly: $first -> $last"
for rank in 0 1; do
  log="$tmp/run/logs/rank_$rank.log"
  [[ -s $log ]] || fail "missing $log"
  grep -q "\[rank $rank\] DEBUG" "$log" || fail "$log has no DEBUG lines of rank $rank: $(cat "$log")"
done
[[ $out != *"[rank 1] INFO"* ]] || fail "rank 1 should not log INFO on the console: $out"

out=$("$MPIEXEC" -np 2 "$SO_BIN" --log-level warning train configs/tiny.toml --set training.output_dir="$tmp/quiet" \
      --set data.path="$tmp/corpus.jsonl" --set training.max_steps=1 2>&1) || fail "quiet run: $out"
[[ $out != *"INFO"* ]] || fail "--log-level warning still printed INFO: $out"

out=$("$MPIEXEC" -np 2 "$SO_BIN" train configs/tiny.toml --set training.output_dir="$tmp/untimed" \
      --set data.path="$tmp/corpus.jsonl" --set training.max_steps=1 --set training.timing_warmup_steps=3 2>&1) ||
  fail "untimed run: $out"
expect_contains "$out" "no step was timed (all 1 fell within [training] timing_warmup_steps = 3)" "an untimed summary"
echo "train: loss $first -> $last in 12 steps on 2 ranks; logs ok"
