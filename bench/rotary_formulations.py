"""RoPE as HF writes it (neg, cat, two multiplies, add over q) against the formulation
model/blocks/rotary.cpp uses since the H200 traces (sign folded into sin, one addcmul): the
same ATen operators LibTorch runs for the C++ code, forward and backward on a query tensor of
the 1.65B benchmark model's shape (transposed, as attention passes it), same run, same data.
On a GPU (--device cuda) the kernel count is what changes; on a CPU, the passes over memory.

    .venv/bin/python bench/rotary_formulations.py [--device cpu|cuda] [--rounds 9]
"""
import argparse, platform, time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--rounds", type=int, default=9)
parser.add_argument("--shape", default="4,20,2048,128", help="batch,heads,tokens,head_dim")
args = parser.parse_args()
B, H, T, D = map(int, args.shape.split(","))
dev = torch.device(args.device)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
print(f"rotary_formulations: {cpu}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
      f"SIMD {torch.backends.cpu.get_cpu_capability()}, device {dev}, q [{B}, {H}, {T}, {D}] fp32")


def hf(x, c, s):
    h = D // 2
    return x * c + torch.cat([-x[..., h:], x[..., :h]], -1) * s


def ours(x, c, s):
    h = D // 2
    signed_sin = torch.cat([-s[..., :h], s[..., h:]], -1)
    return torch.addcmul(x * c, torch.cat([x[..., h:], x[..., :h]], -1), signed_sin)


gen = torch.Generator().manual_seed(0)
q = torch.randn(B, T, H, D, generator=gen).to(dev).transpose(1, 2).requires_grad_()
f = torch.randn(B, T, D // 2, generator=gen)
emb = torch.cat([f, f], -1)
c, s = emb.cos().unsqueeze(1).to(dev), emb.sin().unsqueeze(1).to(dev)
g = torch.randn(B, H, T, D, generator=gen).to(dev)
print(f"largest difference of the outputs: {(hf(q, c, s) - ours(q, c, s)).abs().max().item():.2e}")
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
times = {"hf": [], "ours": []}
for _ in range(args.rounds):  # interleaved rounds
    for name, fn in (("hf", hf), ("ours", ours)):
        q.grad = None
        sync()
        t = time.perf_counter()
        fn(q, c, s).backward(g)
        sync()
        times[name].append(time.perf_counter() - t)
median = {k: sorted(v)[len(v) // 2] * 1e3 for k, v in times.items()}
print(f"forward+backward, median of {args.rounds}: HF's {median['hf']:.2f} ms, ours {median['ours']:.2f} ms")
print(f"summary: rotary hf_over_ours={median['hf'] / median['ours']:.2f}")
