"""Writes a Llama of a given shape as a HuggingFace directory: config.json, bf16 safetensors in
shards of about 600 MB with their index, and the tiny model's byte-level tokenizer, so that
`train`, `eval` and `prepare` take it as they take a download. Weights are N(0, 0.02) from a
fixed seed (norms 1): the benchmarks measure speed and memory, not what the model knows.

    write_llama.py OUT HIDDEN INTERMEDIATE LAYERS HEADS KV_HEADS [VOCAB]   (vocabulary: 32000)
"""
import glob, json, os, shutil, sys

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

out = sys.argv[1]
hidden, intermediate, layers, heads, kv_heads = map(int, sys.argv[2:7])
vocab = int(sys.argv[7]) if len(sys.argv) > 7 else 32000
os.makedirs(out, exist_ok=True)
config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                     num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=2048,
                     tie_word_embeddings=False, torch_dtype="bfloat16")
config.architectures = ["LlamaForCausalLM"]
with torch.device("meta"):
    shapes = {name: p.shape for name, p in LlamaForCausalLM(config).named_parameters()}
generator = torch.Generator().manual_seed(0)
shards, current, size, index = [], {}, 0, {}
for name, shape in shapes.items():
    t = torch.randn(shape, generator=generator).mul_(0.02).to(torch.bfloat16)
    if name.endswith("norm.weight"):
        t = torch.ones(shape, dtype=torch.bfloat16)
    current[name] = t
    size += t.numel() * 2
    if size > 600_000_000:
        shards.append(current)
        current, size = {}, 0
if current:
    shards.append(current)
for i, tensors in enumerate(shards):
    file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
    save_file(tensors, os.path.join(out, file), metadata={"format": "pt"})
    index.update({name: file for name in tensors})
json.dump({"metadata": {}, "weight_map": index}, open(os.path.join(out, "model.safetensors.index.json"), "w"))
config.save_pretrained(out)
# The byte-level tokenizer of the tiny test model (its 260 ids lie in any vocabulary >= 260).
tiny = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "models", "tiny-llama")
for file in glob.glob(os.path.join(tiny, "tokenizer*")):
    shutil.copy(file, out)
