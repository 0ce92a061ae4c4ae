# Helpers for the command-line tests. Environment from CTest: SO_BIN (build/bin/superoffload),
# SO_SOURCE_DIR, MPIEXEC; mpirun's run-as-root variables are set by CTest too.
set -uo pipefail

fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}

# expect_contains "haystack" "needle" "what"
expect_contains() {
  [[ $1 == *"$2"* ]] || fail "$3: expected to find '$2' in:
$1"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# train_tiny OUTPUT_DIR [--set ...]: the tiny model on $tmp/corpus.jsonl at seq_len 32, one
# rank; sets $rc and $log, and fails the test if it ended by a signal.
train_tiny() {
  local out=$1
  shift
  log=$("$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32 \
    --set training.output_dir="$out" "$@" 2>&1)
  rc=$?
  ((rc < 128)) || fail "ended by signal $((rc - 128)): $log"
}
