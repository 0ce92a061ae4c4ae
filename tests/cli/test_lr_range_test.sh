#!/usr/bin/env bash
# LR range test ([lr_schedule] type = "lr_range_test", DeepSpeed's LRRangeTest) on the tiny
# model, 2 ranks: metrics.h5 holds lr and loss per step with lr following DeepSpeed's rule;
# `inspect` prints the loss against lr and the lr where the loss fell fastest, inside the
# swept range; the plot script draws the curve and names the same lr; a run at that lr trains.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 100000 > /dev/null || fail "demo corpus"
train() {  # train OUTPUT_DIR STEPS [args...]
  local output=$1 steps=$2
  shift 2
  "$MPIEXEC" -np 2 --oversubscribe "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" \
    --set data.seq_len=64 --set training.train_micro_batch_size_per_gpu=2 --set training.max_steps="$steps" \
    --set training.output_dir="$output" --set checkpoint.every_steps=0 --set checkpoint.save_on_exit=false "$@"
}
train "$tmp/range" 40 --set lr_schedule.type=lr_range_test --set lr_schedule.warmup_num_steps=0 \
  --set lr_schedule.lr_range_test_min_lr=1e-4 --set lr_schedule.lr_range_test_step_size=1 \
  --set lr_schedule.lr_range_test_step_rate=3 > "$tmp/range.log" 2>&1 || fail "range test run: $(tail -20 "$tmp/range.log")"
"$SO_PYTHON" - "$tmp/range/metrics.h5" <<'PY' || fail "metrics.h5 of the range test"
import sys, h5py, numpy as np
t = h5py.File(sys.argv[1], "r")["train"]
lr, loss = t["lr"][...], t["loss"][...]
assert len(lr) == 40 and np.all(np.isfinite(loss)), (lr, loss)
# DeepSpeed's LRRangeTest: step k (0-based) at min_lr * (1 + rate * k / size).
assert np.allclose(lr, 1e-4 * (1 + 3 * np.arange(40)), rtol=1e-12), lr
PY
out=$("$SO_BIN" inspect "$tmp/range/metrics.h5" 2>&1) || fail "inspect: $out"
expect_contains "$out" "lr range test  40 steps, lr 0.0001 to 0.0118; the loss fell fastest at lr" "inspect's suggestion"
expect_contains "$out" "<- suggested" "the text plot marks the suggestion"
suggested=$(sed -nE 's/.*the loss fell fastest at lr ([0-9.e+-]+) \(suggested\).*/\1/p' <<<"$out")
awk -v s="$suggested" 'BEGIN { exit !(s >= 1e-4 && s <= 0.0118) }' || fail "suggested lr '$suggested' outside the sweep"
plots=$(/usr/bin/python3 share/analysis/plot_metrics.py "$tmp/range/metrics.h5" --out "$tmp/plots" 2>&1) ||
  fail "plot_metrics.py: $plots"
expect_contains "$plots" "lr range test: the loss fell fastest at lr $suggested" "the plot script names the same lr"
[[ -s $tmp/plots/lr_range_test.png ]] || fail "no lr_range_test.png"

# A run at the suggested learning rate (constant) trains.
train "$tmp/at_suggested" 30 --set lr_schedule.type=constant --set lr_schedule.warmup_num_steps=0 \
  --set optimizer.lr="$suggested" > "$tmp/at.log" 2>&1 || fail "run at lr $suggested: $(tail -20 "$tmp/at.log")"
"$SO_PYTHON" - "$tmp/at_suggested/metrics.h5" "$suggested" <<'PY' || fail "the run at the suggested lr did not train"
import sys, h5py, numpy as np
loss = h5py.File(sys.argv[1], "r")["train/loss"][...]
first, last = loss[:3].mean(), loss[-5:].mean()
print(f"lr {sys.argv[2]}: loss {first:.3f} -> {last:.3f}")
assert np.all(np.isfinite(loss)) and last < first - 1.0, loss
PY
echo "LR range test: ok (suggested lr $suggested)"
