#!/usr/bin/env python3
"""Logits of `superoffload eval` against HuggingFace transformers, an independent reference.

For one architecture: build a tiny random HF model (weights perturbed so that biases, norm
scales and every option matter), save it as a HF directory with safetensors, run
`superoffload eval --dump-logits` on random tokens, and compare logits (fp32, 1e-4 absolute)
and the mean loss. With --corrupt, also check that a truncated weights file is refused with
a one-line error instead of a crash.

Packing ([data] attention = "document", #35): rows that each hold several samples, with
`position_ids` restarting at 0 at each (HF's padding-free convention), through `superoffload
eval`; every sample alone through HF (unpacked, no padding) is the reference. Per-token logits
and losses must agree to 1e-5 in fp32: a sample that saw its neighbour, or positions that went on
from it, differs by 1e-2 or more. The samples are longer than the sliding windows (Mistral,
Qwen2, GPT-OSS) so that the window is checked within a packed sample.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch
import transformers

SMALL = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5)

# name: (config class, model class, extra config)
ARCHITECTURES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "llama3": ("LlamaConfig", "LlamaForCausalLM",
               dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                    rope_theta=500000.0, tie_word_embeddings=True, attention_bias=True, mlp_bias=True)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=8, head_dim=16)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(rope_theta=1000000.0)),
    "qwen2_sliding": ("Qwen2Config", "Qwen2ForCausalLM",
                      dict(use_sliding_window=True, sliding_window=6, max_window_layers=1)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=32, tie_word_embeddings=True)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(partial_rotary_factor=0.5, pad_token_id=0)),
    "seed_oss": ("SeedOssConfig", "SeedOssForCausalLM", dict(attention_bias=True, attention_out_bias=False)),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                       decoder_sparse_step=1, mlp_only_layers=[1])),
    "qwen3_moe_unnormalised": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                               dict(num_experts=4, num_experts_per_tok=3, moe_intermediate_size=32,
                                    norm_topk_prob=False, tie_word_embeddings=True)),
    # HF's load-balancing loss pools the routers of all MoE layers (here 3, one of them dense).
    "qwen3_moe_aux": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                      dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, num_hidden_layers=4,
                           mlp_only_layers=[2], output_router_logits=True, router_aux_loss_coef=0.02)),
    "mixtral_aux": ("MixtralConfig", "MixtralForCausalLM",
                    dict(num_local_experts=5, num_experts_per_tok=2, output_router_logits=True,
                         router_aux_loss_coef=0.02)),
    # GPT-OSS's statistics come from the router logits with the router's bias.
    "gpt_oss_aux": ("GptOssConfig", "GptOssForCausalLM",
                    dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16, intermediate_size=48,
                         layer_types=["sliding_attention", "full_attention"], sliding_window=6,
                         output_router_logits=True, router_aux_loss_coef=0.05)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(num_local_experts=5, num_experts_per_tok=2, sliding_window=8)),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=6,
                     intermediate_size=48, layer_types=["sliding_attention", "full_attention"],
                     rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                      "truncate": False, "original_max_position_embeddings": 64,
                                      "rope_theta": 150000.0})),
    # Expert weights stored as MXFP4 blocks and scales, as published GPT-OSS checkpoints are.
    "gpt_oss_mxfp4": ("GptOssConfig", "GptOssForCausalLM",
                      dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16, intermediate_size=64,
                           num_hidden_layers=1, layer_types=["full_attention"])),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",
             dict(vocab_size=97, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0)),
}


def build(name, directory):
    config_class, model_class, extra = ARCHITECTURES[name]
    base = {} if config_class == "GPT2Config" else SMALL
    config = getattr(transformers, config_class)(**{**base, **extra})
    torch.manual_seed(1234)
    model = getattr(transformers, model_class)._from_config(config, attn_implementation="eager",
                                                              torch_dtype=torch.float32)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            # Non-trivial biases and norm scales, so that every parameter is checked.
            p.add_(torch.randn_like(p) * (0.1 if p.dim() == 1 else 0.02))
    model.eval()
    model.save_pretrained(directory, safe_serialization=True)
    if name.endswith("_mxfp4"):
        quantize_experts(model, directory)
    return model, config


def quantize_experts(model, directory):
    """Replaces the expert weights in the saved file by random MXFP4 blocks and scales, and
    gives the HF model the values HF's own dequantizer makes of them."""
    from safetensors.torch import load_file, save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    path = os.path.join(directory, "model.safetensors")
    tensors = load_file(path)
    generator = torch.Generator().manual_seed(7)
    params = dict(model.named_parameters())
    for name in [n for n in tensors if n.endswith("experts.gate_up_proj") or n.endswith("experts.down_proj")]:
        experts, inputs, outputs = tensors.pop(name).shape
        blocks = torch.randint(0, 256, (experts, outputs, inputs // 32, 16), dtype=torch.uint8, generator=generator)
        scales = torch.randint(120, 128, (experts, outputs, inputs // 32), dtype=torch.uint8, generator=generator)
        tensors[name + "_blocks"], tensors[name + "_scales"] = blocks, scales
        with torch.no_grad():
            params[name].copy_(convert_moe_packed_tensors(blocks, scales, dtype=torch.float32))
    save_file(tensors, path, metadata={"format": "pt"})


def check_export(helper, model_dir, tmp, tokens, reference_logits):
    """fp32 export: every tensor bitwise equal to the source, in several shards, and HF
    transformers loads it with identical logits; bf16 export: the values rounded to bf16."""
    from safetensors.torch import load_file

    source = load_file(os.path.join(model_dir, "model.safetensors"))
    out = os.path.join(tmp, "exported")
    subprocess.run([helper, model_dir, out, "fp32", "20KB"], check=True, timeout=300)
    index = os.path.join(out, "model.safetensors.index.json")
    assert os.path.exists(index), "a 20KB shard limit must give a sharded export with an index"
    exported = {}
    for name in sorted(set(__import__("json").load(open(index))["weight_map"].values())):
        exported.update(load_file(os.path.join(out, name)))
    assert exported.keys() == source.keys(), (sorted(exported.keys() ^ source.keys()))
    for name, tensor in source.items():
        assert torch.equal(exported[name], tensor), f"{name} differs after export"
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager")
    with torch.no_grad():
        logits = reloaded(tokens).logits.float().numpy()
    assert np.array_equal(logits, reference_logits), "HF logits of the exported model differ"

    out16 = os.path.join(tmp, "exported_bf16")
    subprocess.run([helper, model_dir, out16, "bf16", "5GB"], check=True, timeout=300)
    bf16 = load_file(os.path.join(out16, "model.safetensors"))
    for name, tensor in source.items():
        assert bf16[name].dtype == torch.bfloat16 and torch.equal(bf16[name], tensor.to(torch.bfloat16)), name
    print(f"export: {len(source)} tensors bitwise identical in fp32 ({len(os.listdir(out)) - 2} shards), "
          "HF loads them with identical logits; bf16 export rounds as torch does")


def check_packed(arch, binary, model, config, tmp):
    """Packed rows through superoffload against each sample alone through HF."""
    generator = torch.Generator().manual_seed(7)
    lengths = [[13, 9, 18], [25, 15]]  # 40 tokens per row
    seq = sum(lengths[0])
    tokens = torch.randint(0, config.vocab_size, (len(lengths), seq), generator=generator)
    positions = torch.cat([torch.cat([torch.arange(n) for n in row]).unsqueeze(0) for row in lengths])
    path = os.path.join(tmp, "packed.h5")
    with h5py.File(path, "w") as f:
        f["tokens"] = tokens.numpy().astype(np.int64)
        f["position_ids"] = positions.numpy().astype(np.int64)
    out = os.path.join(tmp, "packed_logits.h5")
    result = subprocess.run([binary, "eval", "--model", os.path.join(tmp, "model"), "--tokens", path,
                             "--dump-logits", out], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"superoffload eval of packed rows failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    with h5py.File(out, "r") as f:
        logits, loss, loss_mask = f["logits"][...], f["loss"][...], f["loss_mask"][...]
    worst_logit = worst_loss = 0.0
    with torch.no_grad():
        for r, row in enumerate(lengths):
            start = 0
            for n in row:
                sample = tokens[r:r + 1, start:start + n]
                reference = model(sample).logits.float()[0]
                reference_loss = torch.nn.functional.cross_entropy(reference[:-1], sample[0, 1:], reduction="none")
                worst_logit = max(worst_logit, float(np.abs(logits[r, start:start + n] - reference.numpy()).max()))
                worst_loss = max(worst_loss, float(np.abs(loss[r, start:start + n - 1] - reference_loss.numpy()).max()))
                # The sample's last token predicts nothing (not its neighbour's first token).
                assert loss_mask[r, start + n - 1] == 0 or start + n == seq, (r, start, n)
                assert loss_mask[r, start:start + n - 1].all(), (r, start, n)
                start += n
    print(f"{arch}: packed rows (samples {lengths}) against each sample alone in HF: max |logits| {worst_logit:.2e}, "
          f"max |token loss| {worst_loss:.2e}")
    if worst_logit > 1e-5 or worst_loss > 1e-5:
        sys.exit(f"{arch}: a packed sample differs from the same sample alone in HF transformers")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", required=True, choices=sorted(ARCHITECTURES))
    parser.add_argument("--bin", required=True, help="path to build/bin/superoffload")
    parser.add_argument("--corrupt", action="store_true", help="also check refusal of a truncated file")
    parser.add_argument("--export", metavar="EXPORT_ROUNDTRIP",
                        help="also export with this helper: fp32 must be bitwise identical and load in HF")
    args = parser.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "model")
        model, config = build(args.arch, model_dir)
        generator = torch.Generator().manual_seed(99)
        tokens = torch.randint(0, config.vocab_size, (2, 17), generator=generator)
        with h5py.File(os.path.join(tmp, "tokens.h5"), "w") as f:
            f["tokens"] = tokens.numpy().astype(np.int64)
        with torch.no_grad():
            out = model(tokens, labels=tokens)
            if getattr(config, "output_router_logits", False):
                out.loss = model(tokens, labels=tokens, output_router_logits=False).loss  # language-model loss alone
        reference_logits = out.logits.float().numpy()

        result = subprocess.run([args.bin, "eval", "--model", model_dir, "--tokens", os.path.join(tmp, "tokens.h5"),
                                 "--dump-logits", os.path.join(tmp, "logits.h5")],
                                capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            sys.exit(f"superoffload eval failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        with h5py.File(os.path.join(tmp, "logits.h5"), "r") as f:
            logits = f["logits"][...]
            loss_mask = f["loss_mask"][...]
        assert logits.shape == reference_logits.shape, (logits.shape, reference_logits.shape)
        assert loss_mask.sum() == tokens.numel() - tokens.shape[0]
        diff = float(np.abs(logits - reference_logits).max())
        mean_loss = float(next(l.split()[-1] for l in result.stdout.splitlines() if l.startswith("mean loss")))
        loss_diff = abs(mean_loss - out.loss.item())
        print(f"{args.arch}: max |logits - HF| = {diff:.2e}, loss {mean_loss:.6f} vs HF {out.loss.item():.6f}")
        if diff > 1e-4 or loss_diff > 1e-4:
            sys.exit(f"{args.arch}: superoffload eval differs from HF transformers")
        if getattr(config, "output_router_logits", False):
            aux = float(next(l.split()[2] for l in result.stdout.splitlines() if l.startswith("aux loss")))
            reference_aux = out.aux_loss.item()  # unweighted, as superoffload prints it
            print(f"{args.arch}: aux loss {aux:.8f} vs HF {reference_aux:.8f}")
            if abs(aux - reference_aux) > 1e-6:
                sys.exit(f"{args.arch}: load-balancing loss differs from HF transformers")

        check_packed(args.arch, args.bin, model, config, tmp)

        if args.export:
            check_export(args.export, model_dir, tmp, tokens, reference_logits)

        if args.corrupt:
            weights = os.path.join(model_dir, "model.safetensors")
            size = os.path.getsize(weights)
            with open(weights, "r+b") as f:
                f.truncate(size - 100)
            result = subprocess.run([args.bin, "eval", "--model", model_dir, "--tokens",
                                     os.path.join(tmp, "tokens.h5")], capture_output=True, text=True, timeout=120)
            text = result.stdout + result.stderr
            if result.returncode == 0 or "invalid safetensors file" not in text or "(file truncated?)" not in text:
                sys.exit(f"a truncated weights file was not refused clearly (exit {result.returncode}):\n{text}")
            if result.returncode < 0 or "Segmentation" in text:
                sys.exit(f"a truncated weights file crashed eval:\n{text}")
            print("truncated weights file refused:", [l for l in text.splitlines() if "invalid safetensors" in l][0])


if __name__ == "__main__":
    main()
