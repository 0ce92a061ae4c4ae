#!/usr/bin/env bash
# Failures never hang the job:
#  - a rank that stalls (SIGSTOP) leaves the others blocked in a collective; their watchdog
#    ends the job soon after [runtime] collective_timeout_s, naming the rank and what it was
#    doing;
#  - a rank killed with SIGKILL in a 4-rank run ends the whole job within that limit, and the
#    last complete checkpoint stays intact (verified by `inspect`);
#  - the whole job paused (SIGSTOP of every process, as `scontrol suspend` does) for longer than
#    the limit and continued is no fault: it trains to the end.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 60000 > /dev/null || fail "demo corpus"
limit=6
start_run() {  # start_run RANKS OUTPUT_DIR [STEPS]: in the background, sets $launcher
  "$MPIEXEC" -np "$1" --oversubscribe "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" \
    --set data.seq_len=32 --set training.train_batch_size=4 --set training.train_micro_batch_size_per_gpu=0 \
    --set training.max_steps="${3:-200}" --set checkpoint.every_steps=2 --set runtime.collective_timeout_s=$limit \
    --set training.output_dir="$2" > "$2.log" 2>&1 &
  launcher=$!
}
wait_for_checkpoint() {  # wait_for_checkpoint OUTPUT_DIR
  for _ in $(seq 1200); do
    [[ -f $1/checkpoints/latest ]] && return 0
    sleep 0.05
  done
  fail "no checkpoint in $1: $(tail -20 "$1.log")"
}
# Seconds until $launcher ends (fails past a bound, killing what is left).
time_to_end() {
  local start=$SECONDS
  while kill -0 "$launcher" 2>/dev/null; do
    if ((SECONDS - start > limit + 30)); then
      pkill -KILL -f -- "training.output_dir=$1" || true
      fail "the job still ran $((SECONDS - start)) s after the fault: it hangs"
    fi
    sleep 0.2
  done
  echo $((SECONDS - start))
}

# ---- a stalled rank -----------------------------------------------------------------------------
start_run 2 "$tmp/stall"
wait_for_checkpoint "$tmp/stall"
stalled=$(pgrep -f -- "training.output_dir=$tmp/stall" | grep -v "^$launcher$" | tail -1)
kill -STOP "$stalled"
took=$(time_to_end "$tmp/stall")
log=$(cat "$tmp/stall.log")
expect_contains "$log" "no progress for" "watchdog message"
expect_contains "$log" "collective_timeout_s = $limit" "the limit is named"
grep -Eq "rank [01]: no progress for [0-9]+ s while step [0-9]+: " "$tmp/stall.log" || fail "rank and activity not named: $log"
((took <= limit + 15)) || fail "the stalled job took $took s to end (limit $limit s)"

# ---- a killed rank in a 4-rank run --------------------------------------------------------------
start_run 4 "$tmp/killed"
wait_for_checkpoint "$tmp/killed"
victim=$(pgrep -f -- "training.output_dir=$tmp/killed" | grep -v "^$launcher$" | sed -n 2p)
kill -KILL "$victim"
took=$(time_to_end "$tmp/killed")
((took <= limit + 15)) || fail "the job took $took s to end after a rank was killed (limit $limit s)"
grep -Eq "exited on signal 9|no progress for" "$tmp/killed.log" || fail "no message about the dead rank: $(tail -20 "$tmp/killed.log")"
out=$("$SO_BIN" inspect "$tmp/killed/checkpoints/$(cat "$tmp/killed/checkpoints/latest")" 2>&1) \
  || fail "the last checkpoint is not intact: $out"
expect_contains "$out" "match their recorded sizes and CRC32" "checkpoint verified"
# ---- the whole job paused ----------------------------------------------------------------------
start_run 2 "$tmp/paused" 30
wait_for_checkpoint "$tmp/paused"
pkill -STOP -f -- "training.output_dir=$tmp/paused"
sleep $((limit + 5))
pkill -CONT -f -- "training.output_dir=$tmp/paused"
took=$(time_to_end "$tmp/paused")
wait "$launcher"
rc=$?
((rc == 0)) || fail "a job paused for $((limit + 5)) s and continued ended with $rc: $(tail -20 "$tmp/paused.log")"
grep -q "no progress for" "$tmp/paused.log" && fail "the watchdog took a pause of the whole job for a stall"
grep -q "Step 30/30" "$tmp/paused.log" || fail "the paused job did not train to the end: $(tail -5 "$tmp/paused.log")"

echo "faults: paused job trained on; stalled rank ended the job in ${took}s-class time with its message; killed rank ended the 4-rank job; checkpoint intact"
