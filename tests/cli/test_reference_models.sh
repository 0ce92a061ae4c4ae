#!/usr/bin/env bash
# The config.json files shipped under configs/models/ for the seven reference models are the
# real architectures' (rope scaling, q/k norms, fused projections, biases, experts, sliding
# windows and sinks): each, shrunk in width, depth, vocabulary and experts but with every other
# key as shipped, builds through its plugin with init = "random" and trains 2 steps on the CPU
# with finite losses. (At full size they are for GPU benchmarks; `plan` covers their memory.)
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
count=0
for dir in configs/models/*/; do
  name=$(basename "$dir")
  [[ $name == tiny-llama ]] && continue
  mkdir -p "$tmp/$name"
  cp configs/models/tiny-llama/tokenizer*.json "$tmp/$name/"
  "$SO_PYTHON" - "$dir/config.json" "$tmp/$name/config.json" <<'PY' || fail "$name: cannot shrink config.json"
import json, sys
c = json.load(open(sys.argv[1]))
heads, kv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
c.update(hidden_size=64, num_hidden_layers=2, vocab_size=320, num_attention_heads=4,
         num_key_value_heads=max(1, 4 * kv // heads), head_dim=16, intermediate_size=96)
for key in ("num_experts", "num_local_experts"):
    if key in c: c[key] = 4
for key in ("num_experts_per_tok", "experts_per_token"):
    if key in c: c[key] = 2
if "moe_intermediate_size" in c: c["moe_intermediate_size"] = 32
if "layer_types" in c: c["layer_types"] = c["layer_types"][:2]
if "max_window_layers" in c: c["max_window_layers"] = 2
for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
    c.pop(key, None)  # the ids of the real vocabulary; the test uses the tiny byte-level one
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
  log=$("$SO_BIN" train configs/tiny.toml --set model.path="$tmp/$name" --set model.init=random \
        --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32 --set training.max_steps=2 \
        --set training.train_micro_batch_size_per_gpu=2 --set runtime.device=cpu \
        --set training.output_dir="$tmp/run-$name" --set checkpoint.save_on_exit=false 2>&1) \
    || fail "$name: training failed: $(tail -15 <<<"$log")"
  "$SO_PYTHON" - "$tmp/run-$name/metrics.h5" "$name" <<'PY' || fail "$name: losses not finite, or the device plan low"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
loss = f["train/loss"][...]
assert len(loss) == 2 and np.isfinite(loss).all(), loss
# A CPU run's device peak is that of LibTorch's CPU allocations (train/cpu_allocations.hpp): the
# plan's device terms cover it, for every family; nothing is reserved.
peak, planned = f["train/device_peak_bytes"][...], float(f.attrs["planned_device_bytes"])
assert np.isfinite(peak).all() and (peak > 0).all() and peak.max() <= planned, (peak, planned)
assert np.isnan(f["train/device_reserved_peak_bytes"][...]).all()
print(f"{sys.argv[2]}: device peak {peak.max() / 2**20:.1f} MiB, planned {planned / 2**20:.1f} MiB")
PY
  count=$((count + 1))
done
((count == 7)) || fail "expected 7 reference model configs, found $count"
echo "reference models: $count architectures build from their shipped config.json and train"
