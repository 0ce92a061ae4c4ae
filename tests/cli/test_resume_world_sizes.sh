#!/usr/bin/env bash
# The world sizes of real jobs (#32): a run started on 8 ranks (a 2-node 70B job's size),
# resumed on 3, then on 1, trains the same steps as a run that was never interrupted — the same
# samples in the same order (a global batch of 24 that each world size divides), the
# optimizer state resharded exactly — so every step's loss and gradient norm agree with the
# uninterrupted 8-rank run's to round-off (reductions over other rank counts). `prepare` on 8
# ranks writes the same tokens as on 1.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 30000 > /dev/null || fail "demo corpus"
# train RANKS OUTPUT_DIR MAX_STEPS: constant lr (no schedule that depends on max_steps), a save
# every 3 steps, auto-resume from the directory's latest checkpoint.
train() {
  local ranks=$1 dir=$2 steps=$3
  "$MPIEXEC" -np "$ranks" --oversubscribe "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" \
    --set data.seq_len=32 --set training.output_dir="$dir" --set training.train_batch_size=24 \
    --set training.train_micro_batch_size_per_gpu=0 --set training.gradient_accumulation_steps=1 \
    --set lr_schedule.type=constant --set lr_schedule.warmup_num_steps=2 --set training.max_steps="$steps" \
    --set checkpoint.every_steps=3 > "$dir.log" 2>&1 || fail "$ranks rank(s) to step $steps: $(tail -20 "$dir.log")"
}
train 8 "$tmp/whole" 9
train 8 "$tmp/chain" 3
train 3 "$tmp/chain" 6
expect_contains "$(cat "$tmp/chain.log")" "written by 8 rank(s) (resharded)" "8 -> 3"
train 1 "$tmp/chain" 9
expect_contains "$(cat "$tmp/chain.log")" "written by 3 rank(s) (resharded)" "3 -> 1"
"$SO_PYTHON" - "$tmp/whole/metrics.h5" "$tmp/chain/metrics.h5" <<'PY' || fail "the resumed chain differs from the uninterrupted run"
import sys, h5py, numpy as np
files = [h5py.File(p, "r") for p in sys.argv[1:]]
whole, chain = (f["train"] for f in files)
assert list(chain["step"][...]) == list(range(1, 10)), list(chain["step"][...])
# The curve survives the reshards; per-rank rows of the steps before the last one read NaN.
per_rank = files[1]["ranks/step_time_s"][...]
assert per_rank.shape == (9, 1), per_rank.shape
assert np.isnan(per_rank[:6]).all() and np.isfinite(per_rank[6:]).all(), per_rank
for series, tolerance in (("loss", 1e-5), ("grad_norm", 1e-4)):
    a, b = whole[series][...], chain[series][...]
    worst = float(np.max(np.abs(a - b) / np.abs(a)))
    print(f"{series}: 8 -> 3 -> 1 ranks against 8 throughout, worst relative difference {worst:.1e} (steps 1-9)")
    assert worst <= tolerance, (series, a, b)
PY

# prepare on 8 ranks and on 1: the same token arrays.
"$MPIEXEC" -np 8 --oversubscribe "$SO_BIN" prepare configs/tiny.toml --set data.path="$tmp/corpus.jsonl" \
  --output "$tmp/prepared8.h5" > "$tmp/prepare8.log" 2>&1 || fail "prepare on 8 ranks: $(tail -5 "$tmp/prepare8.log")"
"$SO_BIN" prepare configs/tiny.toml --set data.path="$tmp/corpus.jsonl" --output "$tmp/prepared1.h5" \
  > "$tmp/prepare1.log" 2>&1 || fail "prepare on 1 rank: $(tail -5 "$tmp/prepare1.log")"
"$SO_PYTHON" - "$tmp/prepared8.h5" "$tmp/prepared1.h5" <<'PY' || fail "prepare on 8 ranks differs from 1"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
names = []
a.visit(lambda name: names.append(name) if isinstance(a[name], h5py.Dataset) else None)
assert names, "no datasets"
other = []
b.visit(lambda name: other.append(name) if isinstance(b[name], h5py.Dataset) else None)
assert sorted(names) == sorted(other), (names, other)
for name in names:
    assert np.array_equal(a[name][...], b[name][...]), name
print(f"prepare: {len(names)} datasets equal on 8 and 1 rank(s)")
PY
echo "world sizes: 8 -> 3 -> 1 resumes as uninterrupted, prepare on 8 = on 1"
