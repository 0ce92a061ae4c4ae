#!/usr/bin/env bash
# An error on one rank ends the whole job promptly (MPI_Abort), with that rank's message,
# while the other ranks are blocked in a collective.
source "$(dirname "$0")/lib.sh"

start=$(date +%s)
out=$(timeout 60 "$MPIEXEC" -np 3 --oversubscribe "$SO_ABORT_PROBE" 2>&1)
code=$?
elapsed=$(( $(date +%s) - start ))
[[ $code != 0 ]] || fail "the job should fail"
[[ $code != 124 ]] || fail "the job hung (killed by timeout after 60 s)"
(( elapsed < 30 )) || fail "the job took ${elapsed}s to end"
expect_contains "$out" "[rank 2] FATAL   injected failure while loading layer 3 on rank 2" "failing rank's message"
expect_contains "$out" "HINT: this failure is on purpose" "hint"
echo "abort: job ended in ${elapsed}s with exit code $code"
