#!/usr/bin/env bash
# Non-finite numbers never train silently and never become the checkpoint a requeue resumes:
#  - weights holding NaN are refused at load, naming the tensor and the count;
#  - loaded anyway ([model] allow_non_finite_weights), a loss that is NaN before any update
#    ends the job at step 1 with a message, instead of skipping steps and saving;
#  - weights that become inf in training (lr 1e39) are not saved: the job ends and `latest`
#    still names the last finite checkpoint, which `inspect` verifies.
# Every failure is an exit code, not a signal.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
train() {  # train OUTPUT_DIR [--set ...]
  local out=$1
  shift
  train_tiny "$out" --set checkpoint.every_steps=1 "$@"
}

# ---- weights that diverge are not saved ---------------------------------------------------------
train "$tmp/run" --set training.max_steps=2
((rc == 0)) || fail "training: $log"
[[ $(cat "$tmp/run/checkpoints/latest") == step_00000002 ]] || fail "no checkpoint of step 2"
train "$tmp/run" --set training.max_steps=4 --set optimizer.lr=1e39 --set lr_schedule.type='"constant"'
((rc != 0)) || fail "weights of inf were saved: $log"
expect_contains "$log" "non-finite value(s) (NaN or inf) at step 3" "divergence message"
expect_contains "$log" "the checkpoint of step 3 is not written, and 'latest' still names $tmp/run/checkpoints/step_00000002" "latest named"
[[ $(cat "$tmp/run/checkpoints/latest") == step_00000002 && ! -e $tmp/run/checkpoints/step_00000003 ]] \
  || fail "latest moved or step 3 written: $(ls "$tmp/run/checkpoints")"
out=$("$SO_BIN" inspect "$tmp/run/checkpoints/step_00000002" 2>&1) || fail "the last good checkpoint: $out"

# ---- weights holding NaN ------------------------------------------------------------------------
out=$("$SO_BIN" export "$tmp/run" --to "$tmp/hf" --dtype fp32 2>&1) || fail "export: $out"
"$SO_PYTHON" - "$tmp/hf/model.safetensors" <<'PY' || fail "poisoning the weights"
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
header_size = struct.unpack("<Q", data[:8])[0]
entry = json.loads(data[8:8 + header_size])["model.layers.0.mlp.down_proj.weight"]
assert entry["dtype"] == "F32"
start = 8 + header_size + entry["data_offsets"][0]
for k in (3, 11, 12):
    data[start + 4 * k:start + 4 * k + 4] = struct.pack("<f", float("nan"))
open(path, "wb").write(data)
PY
train "$tmp/nan" --set model.path="$tmp/hf" --set model.init='"pretrained"' --set training.max_steps=2
((rc != 0)) || fail "weights holding NaN were accepted: $log"
expect_contains "$log" "$tmp/hf/model.safetensors: tensor \"model.layers.0.mlp.down_proj.weight\" holds 3 non-finite value(s)" \
  "tensor and count named"
expect_contains "$log" "allow_non_finite_weights" "the override is named"

train "$tmp/nan" --set model.path="$tmp/hf" --set model.init='"pretrained"' --set training.max_steps=2 \
  --set model.allow_non_finite_weights=true
((rc != 0)) || fail "a loss of NaN from the first step trained on: $log"
expect_contains "$log" "the loss of step 1 is nan before this run has updated the weights" "first-loss message"
[[ ! -e $tmp/nan/checkpoints/latest ]] || fail "a checkpoint was written for a run with a NaN loss"
echo "non-finite weights and losses: refused, and latest stays intact"
