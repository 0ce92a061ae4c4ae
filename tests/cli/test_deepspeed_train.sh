#!/usr/bin/env bash
# A run from an HF-Trainer-shaped DeepSpeed config (ZeRO-3 + offload, "auto" in the batch,
# optimizer, clipping and zero keys, no scheduler block, steps_per_print), 2 ranks on the tiny
# model: the "auto" zero sizes come from the model's hidden_size (384) and each resolution is
# logged once; without a scheduler the learning rate stays constant, as in DeepSpeed;
# steps_per_print prints DeepSpeed's progress line and leaves our step line alone.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
cat > "$tmp/ds.json" <<'JSON'
{
  "bf16": {"enabled": "auto"},
  "fp16": {"enabled": "auto"},
  "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
  "zero_optimization": {
    "stage": 3,
    "offload_optimizer": {"device": "cpu", "pin_memory": true},
    "sub_group_size": 1e6,
    "reduce_bucket_size": "auto",
    "stage3_prefetch_bucket_size": "auto",
    "stage3_param_persistence_threshold": "auto"
  },
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": "auto",
  "steps_per_print": 2,
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto"
}
JSON
out=$("$MPIEXEC" -np 2 --oversubscribe "$SO_BIN" train --deepspeed-config "$tmp/ds.json" \
      --set model.path=configs/models/tiny-llama --set model.init=random --set data.path="$tmp/corpus.jsonl" \
      --set data.seq_len=32 --set training.train_micro_batch_size_per_gpu=2 --set training.max_steps=4 \
      --set optimizer.lr=2e-3 --set precision.bf16=false --set runtime.device=cpu \
      --set training.output_dir="$tmp/run" --set checkpoint.save_on_exit=false 2>&1) || fail "train: $out"
expect_contains "$out" "reduce_bucket_size = \"auto\": [zero] reduce_bucket_size = 147456, hidden_size² with hidden_size 384" \
  "auto bucket size"
expect_contains "$out" "stage3_param_persistence_threshold = 3840" "auto persistence threshold"
expect_contains "$out" "train_batch_size = \"auto\": [training] train_batch_size = 4 from derived for world size 2" \
  "auto batch size"
expect_contains "$out" "[lr_schedule] type = \"constant\"" "no scheduler: constant lr, noted"
[[ $(grep -c "reduce_bucket_size = \"auto\": " <<<"$out") == 1 ]] || fail "each resolution is logged once: $out"
expect_contains "$out" "step=2, skipped=0, lr=[0.002], mom=[(0.9, 0.999)]" "DeepSpeed's progress line"
expect_contains "$out" "step=4, skipped=0" "DeepSpeed's progress line at step 4"
for step in 1 2 3 4; do expect_contains "$out" "Step $step/4 |" "our step line at step $step"; done
"$SO_PYTHON" - "$tmp/run/metrics.h5" <<'PY' || fail "the learning rate was not constant"
import sys, h5py, numpy as np
lr = h5py.File(sys.argv[1], "r")["train/lr"][...]
assert len(lr) == 4 and np.all(lr == 2e-3), lr
PY
echo "DeepSpeed HF-Trainer config trains: ok"
