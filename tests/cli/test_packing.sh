#!/usr/bin/env bash
# Packing without cross-sample attention (#35): the same instruction samples trained packed
# ([data] packing = true, attention "auto" = "document") and unpacked (one padded row each),
# each step's global batch the whole data set (one rank, no shuffle), must give the same loss
# and gradient norm step for step to fp32 round-off: every token is weighted the same, and a
# packed sample sees neither its neighbours nor positions that go on from them. The packed run
# with attention = "causal" must differ (the comparison can fail). `prepare` records where each
# sample starts (doc_offsets) in both forms.
#
# Adam's epsilon is 1e-6 here, not 1e-8: Adam's first step moves an element by lr·g/(|g|+eps),
# a full ±lr for any |g| ≫ eps, so an element whose true gradient cancels to ~1e-10 takes the
# sign of its round-off, and one CPU's round-off (a CI machine's: step 1 agreed to 6e-7, step 2
# then differed by 1.5e-4) decides where it goes. At 1e-6 such an element moves by ~1e-7·lr;
# packing's correctness is still held to round-off every step.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_PYTHON" - "$tmp/alpaca.jsonl" <<'PY'
import json, random, sys
rng = random.Random(5)
words = "the fox owl cat runs jumps over a lazy dog and sleeps under tree in park".split()
with open(sys.argv[1], "w") as f:
    for i in range(16):
        phrase = " ".join(rng.choice(words) for _ in range(rng.randrange(2, 12)))
        f.write(json.dumps({"instruction": f"Repeat: {phrase}", "input": "", "output": phrase}) + "\n")
PY
common=(configs/tiny.toml --set data.path="$tmp/alpaca.jsonl" --set data.seq_len=255
        --set 'data.prompt_template_no_input="Q: {instruction}\nA: "')
for packing in true false; do
  out=$("$MPIEXEC" -np 1 "$SO_BIN" prepare "${common[@]}" --set data.packing=$packing --output "$tmp/$packing.h5" 2>&1) \
    || fail "prepare with packing = $packing: $out"
done
rows=$("$SO_PYTHON" - "$tmp/true.h5" "$tmp/false.h5" <<'PY'
import sys, h5py, numpy as np
packed, padded = (h5py.File(p, "r") for p in sys.argv[1:3])
for f in (packed, padded):
    offsets, width = f["doc_offsets"][...], f["tokens"].shape[1]
    assert len(offsets) == 16, f"{f.filename}: {len(offsets)} sample starts, not 16"
    assert (f["tokens"][...].reshape(-1)[offsets] == 256).all(), "a sample start is not its BOS"
    rows = f["tokens"].shape[0]
    assert set(range(0, rows * width, width)) <= set(offsets.tolist()), "every row starts with a sample"
assert (padded["doc_offsets"][...] % padded["tokens"].shape[1] == 0).all(), "unpacked rows hold one sample each"
assert packed["tokens"].shape[0] < padded["tokens"].shape[0] // 2, (packed["tokens"].shape, padded["tokens"].shape)
print(packed["tokens"].shape[0], padded["tokens"].shape[0])
PY
) || fail "prepared files: $rows"
read -r packed_rows padded_rows <<< "$rows"

train() {  # NAME DATA ROWS [--set ...]
  local name=$1 data=$2 micro=$3
  shift 3
  "$SO_BIN" train "${common[@]}" --set data.path="$data" --set data.shuffle=false --set training.max_steps=3 \
    --set training.train_micro_batch_size_per_gpu="$micro" --set training.gradient_accumulation_steps=1 \
    --set lr_schedule.warmup_num_steps=0 --set optimizer.lr=3e-3 --set optimizer.eps=1e-6 --set training.output_dir="$tmp/$name" "$@" \
    > "$tmp/$name.log" 2>&1 || fail "train $name: $(tail -5 "$tmp/$name.log")"
}
train packed "$tmp/true.h5" "$packed_rows"
train padded "$tmp/false.h5" "$padded_rows"
train packed_causal "$tmp/true.h5" "$packed_rows" --set data.attention=\"causal\"
expect_contains "$(cat "$tmp/packed.log")" "attention: document" "packed rows attend within samples"
expect_contains "$(cat "$tmp/padded.log")" "every sequence holds one sample" "unpacked rows need no mask"

"$SO_PYTHON" - "$tmp" <<'PY' || fail "packed training differs from unpacked training"
import sys, h5py, numpy as np
def series(name):
    with h5py.File(f"{sys.argv[1]}/{name}/metrics.h5", "r") as f:
        return f["train"]["loss"][...].astype(np.float64), f["train"]["grad_norm"][...].astype(np.float64)
(pl, pg), (ul, ug), (cl, cg) = series("packed"), series("padded"), series("packed_causal")
loss_gaps, norm_gaps = np.abs(pl / ul - 1), np.abs(pg / ug - 1)
loss_gap, norm_gap = loss_gaps.max(), norm_gaps.max()
causal_gap = np.abs(cl / ul - 1).max()
print(f"packed vs unpacked over {len(pl)} steps: loss {loss_gap:.1e}, grad norm {norm_gap:.1e} (relative; "
      f"per step {np.array2string(loss_gaps, precision=1)}, {np.array2string(norm_gaps, precision=1)}); "
      f"packed with causal attention: loss {causal_gap:.1e}")
# Round-off of sums over other row shapes: loss 2e-6 and grad norm 2e-5 (as hf_train_parity).
assert loss_gap <= 2e-6 and norm_gap <= 2e-5, (pl, ul, pg, ug)
assert causal_gap > 1e-3, "cross-sample attention should change the loss"
PY
echo "packing: packed and unpacked training agree"
