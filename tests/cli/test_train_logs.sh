#!/usr/bin/env bash
# `superoffload train` under 2 ranks: every rank writes <output_dir>/logs/rank_<N>.log
# tagged with its rank, only rank 0 talks on the console, --log-level is honoured, and the
# not-yet-built training loop is reported as such (exit status 3, not success).
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

out=$("$MPIEXEC" -np 2 "$SO_BIN" --log-level debug train configs/tiny.toml \
      --set training.output_dir="$tmp/run" 2>&1)
code=$?
[[ $code == 3 ]] || fail "train should exit 3 until the training loop exists, got $code: $out"
expect_contains "$out" "the training loop is not implemented yet" "plain statement"
expect_contains "$out" "rank  host" "binding table on the console"
for rank in 0 1; do
  log="$tmp/run/logs/rank_$rank.log"
  [[ -s $log ]] || fail "missing $log"
  grep -q "\[rank $rank\] DEBUG" "$log" || fail "$log has no DEBUG lines of rank $rank: $(cat "$log")"
done
[[ $out != *"[rank 1] INFO"* ]] || fail "rank 1 should not log INFO on the console: $out"

out=$("$MPIEXEC" -np 2 "$SO_BIN" --log-level warning train configs/tiny.toml \
      --set training.output_dir="$tmp/quiet" 2>&1)
[[ $out != *"INFO"* ]] || fail "--log-level warning still printed INFO: $out"
echo "train logs: ok"
