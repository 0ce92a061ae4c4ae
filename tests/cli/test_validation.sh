#!/usr/bin/env bash
# Validation during training (#35) on the tiny model, end to end:
#  1. the eval loss before the first step equals HF transformers' mean next-token loss over
#     the same samples of [data] eval_path (the step-0 checkpoint exported to HF, fp32);
#  2. a share held out of the training data ([data] eval_fraction) gives the same eval loss
#     bit for bit on 1 and 2 ranks, with a short last batch and a round of padding on one
#     rank; /eval rows at 0, every eval_every_steps and the end; the step line, the summary,
#     the CSV monitor, `inspect` and plot_metrics.py show the curve;
#  3. keep_best keeps the lowest eval loss's checkpoint beside keep_last = 1 and
#     `export --checkpoint best` exports it (a learning rate that makes the model worse, so
#     the best is the start);
#  4. early_stopping_patience stops after that many evaluations without improvement (lr 0:
#     the eval loss never moves), with a final checkpoint and the reason;
#  5. a run preempted between evaluations and resumed makes the same decisions as the
#     uninterrupted one: the same eval losses, best checkpoint and early stop;
#  6. bad input: too small an eval set for the ranks, a resume with another eval_fraction,
#     the training file as eval_path (a warning); HF Trainer's eval_steps.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 40000 > /dev/null || fail "demo corpus"
"$SO_DEMO_CORPUS" "$tmp/held.jsonl" --tokens 4000 --seed 7 > /dev/null || fail "held-out corpus"
common=(configs/tiny.toml --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32
        --set training.train_micro_batch_size_per_gpu=2 --set lr_schedule.type=constant
        --set lr_schedule.warmup_num_steps=0)
run() {  # run RANKS OUTPUT_DIR [--set ...]: sets $rc and $log
  local ranks=$1 out=$2
  shift 2
  log=$("$MPIEXEC" -np "$ranks" ${bind:-} "$SO_BIN" train "${common[@]}" --set training.output_dir="$out" "$@" 2>&1)
  rc=$?
  ((rc < 128)) || fail "ended by signal $((rc - 128)): $log"
}

# ---- 1. Against HF transformers.
"$MPIEXEC" -np 1 "$SO_BIN" prepare "${common[@]}" --set data.path="$tmp/held.jsonl" --output "$tmp/held.h5" \
  > "$tmp/prepare.log" 2>&1 || fail "prepare: $(cat "$tmp/prepare.log")"
run 1 "$tmp/hf" --set data.eval_path="$tmp/held.h5" --set training.eval_on_start=true --set training.max_steps=1 \
  --set training.per_device_eval_batch_size=4 --set training.eval_max_batches=5 --set checkpoint.keep_best=true
((rc == 0)) || fail "eval_path run: $log"
expect_contains "$log" "from $tmp/held.h5 ([data] eval_path)" "the validation line names the file"
expect_contains "$log" "Step 0/1 (before training) | Eval loss" "the evaluation before the first step"
out=$("$MPIEXEC" -np 1 "$SO_BIN" export "$tmp/hf/checkpoints/step_00000000" --to "$tmp/hf_export" --dtype fp32 2>&1) \
  || fail "export of step 0: $out"
"$SO_PYTHON" - "$tmp/held.h5" "$tmp/hf_export" "$tmp/hf/metrics.h5" <<'PY' || fail "the eval loss differs from HF transformers'"
import sys, h5py, numpy as np, torch, transformers
tokens = h5py.File(sys.argv[1], "r")["tokens"][...]
seq, count = 32, 20  # eval_max_batches 5 x per_device_eval_batch_size 4: the first 20 samples
samples = torch.tensor(np.stack([tokens[i * seq:i * seq + seq + 1] for i in range(count)]), dtype=torch.long)
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[2], torch_dtype=torch.float32).eval()
with torch.no_grad():
    logits = model(input_ids=samples[:, :seq]).logits
hf = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), samples[:, 1:].reshape(-1)).item()
metrics = h5py.File(sys.argv[3], "r")
ours, counted = metrics["eval/loss"][0], metrics["eval/tokens"][0]
assert metrics["eval/step"][0] == 0 and counted == count * seq, (metrics["eval/step"][...], counted)
assert abs(ours - hf) <= 1e-5 * abs(hf), f"ours {ours} vs HF {hf}"
print(f"eval loss before training: ours {ours:.7f}, HF transformers {hf:.7f} ({counted:.0f} tokens)")
PY

# ---- 2. A held-out share, on 1 and 2 ranks.
share=(--set data.eval_fraction=0.1 --set training.eval_every_steps=2 --set training.eval_on_start=true
       --set training.max_steps=4 --set training.per_device_eval_batch_size=3 --set training.eval_max_batches=15
       --set metrics.csv=true)
# One core per rank on both world sizes: LibTorch's products may split their sums differently
# with another thread count (seen on AVX-512 CPUs), and the equality below is bit for bit.
for ranks in 1 2; do
  bind="--bind-to core" run "$ranks" "$tmp/share$ranks" "${share[@]}"
  ((rc == 0)) || fail "eval_fraction on $ranks rank(s): $log"
done
expect_contains "$log" "held out: never trained on" "the validation line"
expect_contains "$log" "1125 trained on" "the training set without the held-out share"
grep -qE "Step 2/4 \|.* \| Eval loss [0-9.]+ \| ppl [0-9.]+" <<< "$log" || fail "no eval loss on the step line: $log"
grep -qE "Step 3/4 \|.*Eval loss" <<< "$log" && fail "an eval loss on a step without evaluation: $log"
expect_contains "$log" "validation: 3 evaluation(s)" "the summary"
"$SO_PYTHON" - "$tmp/share1" "$tmp/share2" <<'PY' || fail "the held-out evaluations"
import csv, os, sys, h5py, numpy as np
one, two = (h5py.File(os.path.join(d, "metrics.h5"), "r") for d in sys.argv[1:3])
for f in (one, two):
    assert f["eval/step"][...].tolist() == [0, 2, 4], f["eval/step"][...]
    assert (f["eval/tokens"][...] == 45 * 32).all(), f["eval/tokens"][...]  # 15 batches of 3 samples
    assert np.isfinite(f["eval/loss"][...]).all() and (f["eval/seconds"][...] > 0).all()
# Before the first step the weights are the same on any world size, and so is the loss.
assert one["eval/loss"][0] == two["eval/loss"][0], (one["eval/loss"][0], two["eval/loss"][0])
with open(os.path.join(sys.argv[2], "superoffload", "Eval_Samples_eval_loss.csv")) as f:
    rows = list(csv.reader(f))[1:]
assert [int(r[0]) for r in rows] == [0, 8, 16], rows  # against samples seen (2 x 2 ranks per step)
assert np.array_equal([float(r[1]) for r in rows], two["eval/loss"][...]), rows
print("eval loss before training", one["eval/loss"][0], "on 1 and 2 ranks; /eval and the CSV monitor agree")
PY
out=$("$SO_BIN" inspect "$tmp/share2/metrics.h5" 2>&1) || fail "inspect: $out"
expect_contains "$out" "validation  3 evaluation(s); eval loss first" "inspect's eval curve"
expect_contains "$out" "<- lowest" "inspect marks the lowest"
out=$(/usr/bin/python3 share/analysis/plot_metrics.py "$tmp/share2/metrics.h5" --out "$tmp/plots" 2>&1) \
  || fail "plot_metrics.py: $out"
expect_contains "$out" "eval loss: lowest" "plot_metrics.py's eval curve"

# ---- 3. keep_best: a learning rate that makes the model worse keeps the start.
run 1 "$tmp/best" --set data.eval_fraction=0.05 --set training.eval_every_steps=2 --set training.eval_on_start=true \
  --set training.max_steps=4 --set training.eval_max_batches=4 --set optimizer.lr=0.05 --set checkpoint.keep_last=1 \
  --set checkpoint.keep_best=true
((rc == 0)) || fail "keep_best run: $log"
[[ $(cat "$tmp/best/checkpoints/best") == step_00000000 ]] || fail "best is $(cat "$tmp/best/checkpoints/best"): $log"
[[ $(cat "$tmp/best/checkpoints/latest") == step_00000004 ]] || fail "latest is $(cat "$tmp/best/checkpoints/latest")"
[[ -f $tmp/best/checkpoints/step_00000000/DONE && ! -e $tmp/best/checkpoints/step_00000002 ]] \
  || fail "keep_last = 1 and keep_best: $(ls "$tmp/best/checkpoints")"
"$SO_PYTHON" - "$tmp/best/metrics.h5" <<'PY' || fail "the best checkpoint is not the lowest eval loss"
import sys, h5py, numpy as np
loss = h5py.File(sys.argv[1], "r")["eval/loss"][...]
assert np.argmin(loss) == 0 and loss[1:].min() > loss[0], loss
PY
out=$("$MPIEXEC" -np 1 "$SO_BIN" export "$tmp/best" --checkpoint best --to "$tmp/best_export" 2>&1) || fail "export best: $out"
expect_contains "$out" "step_00000000 (step 0" "export names the best checkpoint"
out=$("$MPIEXEC" -np 1 "$SO_BIN" export "$tmp/share1" --checkpoint best --to "$tmp/none" 2>&1)
(($? == 1)) || fail "export --checkpoint best of a run without keep_best must fail: $out"
expect_contains "$out" "no checkpoint is named best" "export best without one"

# ---- 4. Early stopping: at lr 0 the eval loss never improves after the first evaluation.
run 1 "$tmp/stop" --set data.eval_fraction=0.05 --set training.eval_every_steps=1 --set training.max_steps=10 \
  --set training.eval_max_batches=2 --set training.early_stopping_patience=2 --set optimizer.lr=0 \
  --set lr_schedule.min_lr=0
((rc == 0)) || fail "early stopping run: $log"
expect_contains "$log" "early stopping after step 3 of 10: 2 evaluation(s) in a row without lowering the eval loss" \
  "the early stop and why"
[[ $(cat "$tmp/stop/checkpoints/latest") == step_00000003 ]] || fail "no final checkpoint at the early stop"
expect_contains "$log" "stopped early" "the summary says it stopped early"

# ---- 5. Preempted and resumed: the same decisions as uninterrupted. With a threshold no
# evaluation can beat, the run stops at the 4th evaluation (step 8); the best moves on.
# Compared bit for bit, so without speculation: a clipped step replays the sub-groups stepped
# speculatively, equal to stepping them late only to fp32 round-off, and which ones were
# speculated depends on timing (1 run in 4 differed by 4e-6 under a busy CPU, 2026-11-28).
decide=(--set offload.super_offload=false
        --set data.eval_fraction=0.05 --set training.eval_every_steps=2 --set training.max_steps=20
        --set training.eval_max_batches=4 --set training.early_stopping_patience=3
        --set training.early_stopping_threshold=100 --set checkpoint.keep_best=true --set checkpoint.keep_last=1)
run 1 "$tmp/whole" "${decide[@]}"
((rc == 0)) || fail "uninterrupted run: $log"
expect_contains "$log" "early stopping after step 8 of 20" "the uninterrupted run's stop"
"$SO_BIN" train "${common[@]}" --set training.output_dir="$tmp/cut" "${decide[@]}" > "$tmp/cut.log" 2>&1 &
trainer=$!
for _ in $(seq 600); do
  grep -q "Step 3/20" "$tmp/cut.log" 2>/dev/null && break
  sleep 0.05
done
kill -USR1 "$trainer"
wait "$trainer"
code=$?
[[ $code == 75 ]] || fail "the preempted run must exit with 75, got $code: $(tail -20 "$tmp/cut.log")"
step=$(sed -nE 's/.*saving a checkpoint at step ([0-9]+) and stopping.*/\1/p' "$tmp/cut.log")
((step >= 3 && step < 8)) || fail "preempted at step '$step'"
run 1 "$tmp/cut" "${decide[@]}"
((rc == 0)) || fail "resumed run: $log"
expect_contains "$log" "resumed from" "the resume"
expect_contains "$log" "early stopping after step 8 of 20" "the resumed run's stop"
[[ $(cat "$tmp/cut/checkpoints/best") == $(cat "$tmp/whole/checkpoints/best") ]] || fail "another best checkpoint"
"$SO_PYTHON" - "$tmp/whole/metrics.h5" "$tmp/cut/metrics.h5" <<'PY' || fail "the resumed run's evaluations differ"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
for name in ("eval/step", "eval/loss", "eval/tokens", "train/loss"):
    assert np.array_equal(a[name][...], b[name][...]), f"{name}: {a[name][...]} vs {b[name][...]}"
print("preempted and resumed: eval losses", b["eval/loss"][...], "as uninterrupted")
PY

# ---- 6. Bad input, and HF Trainer's name.
run 2 "$tmp/small" --set data.eval_fraction=0.05 --set training.per_device_eval_batch_size=4 \
  --set training.eval_max_batches=1 --set training.max_steps=1
((rc == 1)) || fail "an eval set smaller than a batch per rank must be refused (exit 1), got $rc: $log"
expect_contains "$log" "fewer than one batch per rank: 4 ([training] per_device_eval_batch_size) x 2 rank(s) = 8" \
  "the sizes of a too-small eval set"
expect_contains "$log" "raise eval_max_batches" "the fix"
run 1 "$tmp/share1" "${share[@]}" --set data.eval_fraction=0.2 --set training.max_steps=6
((rc == 1)) || fail "a resume with another eval_fraction must be refused: $log"
expect_contains "$log" "[data] eval_fraction was 0.1, is 0.2" "the changed share"
run 1 "$tmp/same" --set data.eval_path="$tmp/corpus.jsonl" --set training.max_steps=1 --set training.eval_max_batches=2 \
  --set training.eval_steps=1
((rc == 0)) || fail "eval_path = path with HF's eval_steps: $log"
expect_contains "$log" "is the training data" "eval_path = path warns"
expect_contains "$log" "evaluated every 1 steps" "HF Trainer's eval_steps"
echo "validation: HF parity before training, same loss on 1 and 2 ranks, best kept and exported, early stop, exact resume, bad input refused"
