#!/usr/bin/env bash
# `superoffload prepare` on instruction data (Alpaca JSONL) with the demo model's tokenizer:
# the file written by 2 ranks equals the one written by 1 (work split, order kept), rows carry
# a loss mask, train runs on both the prepared file and the JSONL directly, and a broken
# record is reported with its file and line.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_PYTHON" - "$tmp/alpaca.jsonl" <<'PY'
import json, random, sys
rng = random.Random(3)
with open(sys.argv[1], "w") as f:
    for i in range(300):
        a, b = rng.randrange(100), rng.randrange(100)
        record = {"instruction": "Add the numbers.", "input": f"{a} + {b}", "output": f"{a + b}"}
        if i % 3 == 0:
            record = {"instruction": f"Repeat the word {['fox', 'owl', 'cat'][i % 9 // 3]}.", "input": "",
                      "output": ['fox', 'owl', 'cat'][i % 9 // 3]}
        f.write(json.dumps(record) + "\n")
PY
common=(configs/tiny.toml --set data.path="$tmp/alpaca.jsonl" --set data.seq_len=255)
"$MPIEXEC" -np 1 "$SO_BIN" prepare "${common[@]}" --output "$tmp/one.h5" > "$tmp/one.log" 2>&1 \
  || fail "prepare on 1 rank: $(cat "$tmp/one.log")"
out=$("$MPIEXEC" -np 2 "$SO_BIN" prepare "${common[@]}" --output "$tmp/two.h5" 2>&1) || fail "prepare on 2 ranks: $out"
expect_contains "$out" "300 records" "record count"
expect_contains "$out" "rows of 256" "row length"
"$SO_PYTHON" - "$tmp/one.h5" "$tmp/two.h5" <<'PY' || fail "prepared files differ or are malformed"
import sys, h5py, numpy as np
one, two = (h5py.File(p, "r") for p in sys.argv[1:3])
assert one["tokens"].shape == (300, 256) and one["tokens"].dtype == np.uint32, one["tokens"]
for name in ("tokens", "loss_mask"):
    assert np.array_equal(one[name][...], two[name][...]), f"{name} differs between 1 and 2 ranks"
tokens, mask = one["tokens"][...], one["loss_mask"][...]
assert (tokens[:, 0] == 256).all(), "every row starts with BOS"
assert not mask[tokens == 258].any(), "padding carries loss"
assert mask.sum(axis=1).min() >= 2, "every row has a response and EOS"
assert one.attrs["format"] == b"alpaca" or one.attrs["format"] == "alpaca", one.attrs["format"]
print("prepared files equal:", tokens.shape, int(mask.sum()), "loss tokens")
PY

for data in "$tmp/two.h5" "$tmp/alpaca.jsonl"; do
  out=$("$MPIEXEC" -np 2 "$SO_BIN" train configs/tiny.toml --set data.path="$data" --set data.seq_len=255 \
        --set training.output_dir="$tmp/run-$(basename "$data")" --set training.max_steps=3 2>&1) || fail "train on $data: $out"
  expect_contains "$out" "Step 3/3 | Loss" "training on $data"
done
expect_contains "$out" "300 alpaca records" "JSONL tokenized at start-up"

printf '{"instruction": "x", "output": "y"}\n{"instruction": "x"}\n' > "$tmp/bad.jsonl"
out=$("$MPIEXEC" -np 2 "$SO_BIN" prepare configs/tiny.toml --set data.path="$tmp/bad.jsonl" --output "$tmp/bad.h5" 2>&1) \
  && fail "a record without output was accepted"
expect_contains "$out" "bad.jsonl:2: the record has no \"output\" field" "error names file and line"
[[ ! -e $tmp/bad.h5 ]] || fail "a failed prepare left an output file"
echo "prepare: 1 and 2 ranks agree; train on prepared and raw JSONL; errors name file:line"
