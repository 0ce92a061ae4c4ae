#!/usr/bin/env python3
"""Writes a ResidualMlpForCausalLM model directory (config.json, model.safetensors) and a
tokens file, and prints the mean next-token loss computed here in plain PyTorch — the
reference for `superoffload eval` with the out-of-tree plugin."""
import json
import os
import sys

import h5py
import torch
from safetensors.torch import save_file

directory = sys.argv[1]
os.makedirs(directory, exist_ok=True)
vocab, hidden, inner, layers = 31, 16, 24, 2
config = {"architectures": ["ResidualMlpForCausalLM"], "vocab_size": vocab, "hidden_size": hidden,
          "intermediate_size": inner, "num_hidden_layers": layers, "rms_norm_eps": 1e-6}
json.dump(config, open(os.path.join(directory, "config.json"), "w"))
g = torch.Generator().manual_seed(3)
w = {"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=g)}
for i in range(layers):
    w[f"model.layers.{i}.up.weight"] = torch.randn(inner, hidden, generator=g) * 0.2
    w[f"model.layers.{i}.up.bias"] = torch.randn(inner, generator=g) * 0.1
    w[f"model.layers.{i}.down.weight"] = torch.randn(hidden, inner, generator=g) * 0.2
    w[f"model.layers.{i}.down.bias"] = torch.randn(hidden, generator=g) * 0.1
w["model.norm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
w["lm_head.weight"] = torch.randn(vocab, hidden, generator=g) * 0.3
save_file(w, os.path.join(directory, "model.safetensors"))

tokens = torch.randint(0, vocab, (3, 12), generator=g)
with h5py.File(os.path.join(directory, "tokens.h5"), "w") as f:
    f["tokens"] = tokens.numpy()
# Training data for the same model: a 1-D uint32 stream with a repeating pattern.
stream = (torch.arange(4000) * 7 % vocab).to(torch.int64).numpy().astype("uint32")
with h5py.File(os.path.join(directory, "train.h5"), "w") as f:
    f["tokens"] = stream
x = w["model.embed_tokens.weight"][tokens]
for i in range(layers):
    h = torch.relu(x @ w[f"model.layers.{i}.up.weight"].T + w[f"model.layers.{i}.up.bias"])
    x = x + h @ w[f"model.layers.{i}.down.weight"].T + w[f"model.layers.{i}.down.bias"]
x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w["model.norm.weight"]
logits = x @ w["lm_head.weight"].T
loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), tokens[:, 1:].reshape(-1))
print(f"{loss.item():.9f}")
