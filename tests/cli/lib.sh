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

# on_device DEVICE: sets $device and $ranks for a test that runs on the CPU (2 ranks) or, under
# the gpu label, on one GPU (1 rank); without a visible GPU the test is skipped (exit 0).
on_device() {
  device=$1 ranks=2
  if [[ $device == cuda ]]; then
    nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || { echo "SKIPPED: no GPU visible (nvidia-smi -L lists none)"; exit 0; }
    ranks=1
  fi
}

# train_short OUTPUT_DIR [--set ...]: the tiny model on $tmp/corpus.jsonl, $ranks ranks of
# $device, 4 steps of 2 micro-batches of 2 x 32 tokens, no checkpoint.
train_short() {
  local output=$1
  shift
  "$MPIEXEC" -np "$ranks" --oversubscribe "$SO_BIN" train configs/tiny.toml --set runtime.device="$device" \
    --set data.path="$tmp/corpus.jsonl" \
    --set data.seq_len=32 --set training.train_micro_batch_size_per_gpu=2 --set training.gradient_accumulation_steps=2 \
    --set training.max_steps=4 --set training.output_dir="$output" --set checkpoint.every_steps=0 \
    --set checkpoint.save_on_exit=false "$@"
}

# peak_rss_kib OUT COMMAND...: runs COMMAND and writes its peak resident set in KiB to OUT
# (getrusage of the child, in the project's Python: no package beyond scripts/setup's).
peak_rss_kib() {
  "$SO_PYTHON" - "$@" <<'PY'
import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\n")
sys.exit(code)
PY
}

# train_one_step MODEL_DIR OUTPUT_DIR: one step of MODEL_DIR on $tmp/corpus.jsonl (32 tokens per
# row), one process, checkpointed at its end; fails the test with the log's tail otherwise.
train_one_step() {
  "$SO_BIN" train configs/tiny.toml --set model.path="$1" --set data.path="$tmp/corpus.jsonl" \
    --set data.seq_len=32 --set training.max_steps=1 --set training.output_dir="$2" \
    > "$2.log" 2>&1 || fail "training $1: $(tail -20 "$2.log")"
}
