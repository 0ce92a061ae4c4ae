#!/usr/bin/env bash
# `superoffload export` of a checkpoint written by 2 ranks: the safetensors hold exactly the
# checkpoint's fp32 master weights, HF transformers loads the directory, and its logits equal
# `superoffload eval`'s on the exported model within 1e-4; `inspect` summarises the run and
# share/analysis/plot_metrics.py (Debian's h5py and matplotlib) draws its metrics.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 40000 > /dev/null || fail "demo corpus"
"$MPIEXEC" -np 2 "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32 \
  --set training.max_steps=3 --set training.output_dir="$tmp/run" > "$tmp/train.log" 2>&1 \
  || fail "training: $(tail -20 "$tmp/train.log")"
out=$("$SO_BIN" export "$tmp/run" --to "$tmp/hf" --dtype fp32 --max-shard-size 8MB 2>&1) || fail "export: $out"
# The checkpoint fills the model: nothing is initialised randomly first, and the log says nothing of it.
[[ $out != *"initialised randomly"* ]] || fail "export claims a random initialisation: $out"
expect_contains "$out" "written by 2 rank(s)" "export log"
[[ -f $tmp/hf/model.safetensors.index.json && -f $tmp/hf/tokenizer.json ]] || fail "export is not a sharded HF directory"

"$SO_PYTHON" - "$tmp" <<'PY' || fail "exported weights or tokens"
import json, sys, h5py, numpy as np
from safetensors.numpy import load_file
tmp = sys.argv[1]
checkpoint = f"{tmp}/run/checkpoints/step_00000003"
manifest = json.load(open(f"{checkpoint}/manifest.json"))
files = [h5py.File(f"{checkpoint}/rank_{k:05d}.h5", "r") for k in range(manifest["world_size"])]
index = json.load(open(f"{tmp}/hf/model.safetensors.index.json"))
tensors = {}
for name in set(index["weight_map"].values()):
    tensors.update(load_file(f"{tmp}/hf/{name}"))
for l, layer in enumerate(manifest["layers"]):
    flat = np.concatenate([f[f"layers/{l:05d}/master"][...] for f in files])
    for p in layer["parameters"]:
        expected = flat[p["offset"]:p["offset"] + p["numel"]].reshape(p["shape"])
        assert np.array_equal(tensors[p["name"]], expected), f"{p['name']} differs from the checkpoint"
rng = np.random.default_rng(0)
with h5py.File(f"{tmp}/tokens.h5", "w") as f:
    f["tokens"] = rng.integers(0, 256, size=(2, 24), dtype=np.int64)
print(len(tensors), "tensors equal to the checkpoint's fp32 master weights")
PY
out=$("$SO_BIN" eval --model "$tmp/hf" --tokens "$tmp/tokens.h5" --dump-logits "$tmp/logits.h5" 2>&1) || fail "eval: $out"
"$SO_PYTHON" - "$tmp" <<'PY' || fail "HF logits differ from superoffload eval"
import sys, h5py, numpy as np, torch
from transformers import AutoModelForCausalLM
tmp = sys.argv[1]
model = AutoModelForCausalLM.from_pretrained(f"{tmp}/hf", torch_dtype=torch.float32).eval()
tokens = torch.from_numpy(h5py.File(f"{tmp}/tokens.h5", "r")["tokens"][...])
with torch.no_grad():
    reference = model(tokens).logits.numpy()
ours = h5py.File(f"{tmp}/logits.h5", "r")["logits"][...]
error = float(np.abs(reference - ours).max())
assert error <= 1e-4, f"max |HF - superoffload| = {error}"
print(f"HF transformers loads the export; logits within {error:.2e} of superoffload eval")
PY
out=$("$SO_BIN" inspect "$tmp/run" 2>&1) || fail "inspect: $out"
for expected in "steps       1 to 3" "loss        first" "step        3" "match their recorded sizes and CRC32"; do
  expect_contains "$out" "$expected" "inspect"
done
/usr/bin/python3 share/analysis/plot_metrics.py "$tmp/run/metrics.h5" --out "$tmp/plots" > "$tmp/plots.log" 2>&1 \
  || fail "plot_metrics.py: $(cat "$tmp/plots.log")"
for png in loss throughput phases ranks; do
  [[ $(head -c 8 "$tmp/plots/$png.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$png.png is not a PNG"
done
echo "export: checkpoint -> HF directory equal to the fp32 masters; HF logits match eval; inspect and plots ok"
