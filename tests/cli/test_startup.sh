#!/usr/bin/env bash
# The start-up timeline (#52): a run of the tiny model on 2 ranks logs, after step 1, every phase
# from the process's start to the end of step 1 with its seconds, the slowest rank's and the
# peak-RSS growth; the phases add up to the total; metrics.h5 /startup holds the same and
# `inspect` prints it. From random initialisation the filling phase is "random
# initialisation"; from safetensors it is "weights read", with the bytes rank 0 read (its
# shards': about half the stored tensors' bytes, read from the files' own headers here) and a rate.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"
"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
train() {  # train OUTPUT_DIR [args...]
  local output=$1
  shift
  "$MPIEXEC" -np 2 --oversubscribe "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" \
    --set data.seq_len=32 --set training.max_steps=2 --set training.output_dir="$output" \
    --set checkpoint.every_steps=0 "$@"
}
train "$tmp/random" > "$tmp/random.log" 2>&1 || fail "random run: $(tail -20 "$tmp/random.log")"
log=$(cat "$tmp/random.log")
expect_contains "$log" "start-up: " "the logged timeline"
for phase in "process and MPI start-up" "configuration and run directory" "binding" "model build" \
  "random initialisation" "partitioning and communicator" "optimizer state" "tokenizer and data" "checkpoints" \
  "metrics" "first step"; do
  grep -qE "^  $phase +[0-9.]+ " "$tmp/random.log" || fail "phase '$phase' not in the logged timeline: $log"
done
out=$("$SO_BIN" inspect "$tmp/random" 2>&1) || fail "inspect: $out"
expect_contains "$out" "start-up: " "inspect's timeline"

# The same model from safetensors: export the run's final checkpoint, train from it.
"$MPIEXEC" -np 1 "$SO_BIN" export "$tmp/random/checkpoints/step_00000002" --to "$tmp/model" --dtype bf16 \
  > "$tmp/export.log" 2>&1 || fail "export: $(cat "$tmp/export.log")"
cp configs/models/tiny-llama/tokenizer* "$tmp/model/" 2> /dev/null
train "$tmp/pretrained" --set model.path="$tmp/model" --set model.init=pretrained > "$tmp/pretrained.log" 2>&1 ||
  fail "pretrained run: $(tail -20 "$tmp/pretrained.log")"
grep -qE "^  weights read +[0-9.]+ .* GB at [0-9.]+ GB/s" "$tmp/pretrained.log" ||
  fail "no 'weights read' phase with bytes and rate: $(cat "$tmp/pretrained.log")"

"$SO_PYTHON" - "$tmp/random/metrics.h5" "$tmp/pretrained/metrics.h5" "$tmp/model" <<'PY' || fail "/startup in metrics.h5"
import glob, json, struct, sys, h5py, numpy as np
for path in sys.argv[1:3]:
    f = h5py.File(path, "r")
    attr = f["startup/seconds"].attrs["phases"]
    names = json.loads(attr.decode() if isinstance(attr, bytes) else attr)
    seconds, slowest = f["startup/seconds"][...], f["startup/slowest_rank_seconds"][...]
    assert names[0] == "process and MPI start-up" and names[-1] == "first step", names
    known = ~np.isnan(seconds)
    assert known.sum() >= 12, (names, seconds)  # one filling phase of the two is NaN
    assert (seconds[known] >= 0).all() and (slowest[known] >= seconds[known] - 1e-9).all(), (seconds, slowest)
    assert seconds[names.index("first step")] > 0 and seconds[0] > 0, seconds
    print(path.split("/")[-2], f"{np.nansum(seconds):.2f} s over {known.sum()} phases")
f = h5py.File(sys.argv[2], "r")
names = json.loads(f["startup/seconds"].attrs["phases"])
read = f["startup/bytes_read"][names.index("weights read")]
assert np.isnan(f["startup/seconds"][names.index("random initialisation")]) if "random initialisation" in names else True
stored = 0
for shard in glob.glob(sys.argv[3] + "/*.safetensors"):  # the tensors' bytes, from each file's JSON header
    with open(shard, "rb") as s:
        header = json.loads(s.read(struct.unpack("<Q", s.read(8))[0]))
    stored += sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")
# Each rank reads only the bytes of its own shards (#52): rank 0's timeline counts about half of
# the stored bytes at 2 ranks (each layer split in two, padding aside), never all of them.
assert 0.45 * stored <= read <= 0.55 * stored, (read, stored)
print(f"weights read by rank 0: {read:.0f} bytes of the stored tensors' {stored} (its shards)")
PY
echo "startup: ok"
