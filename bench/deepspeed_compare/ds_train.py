#!/usr/bin/env python3
"""DeepSpeed's side of bench/deepspeed_compare/compare.sh.

Trains a Hugging Face causal LM built from a config.json with random weights (fixed seed)
with DeepSpeed ZeRO stage 3 and the optimizer offloaded to the CPU, as SuperOffload
(`super_offload: true`) or as ZeRO-Offload, on random tokens of a fixed shape, and prints
the steady-state step time and tokens/s, the steps whose gradient norm was clipped (each one a
rollback of SuperOffload's speculated step), and the device's and the process's memory peaks
in one `deepspeed_compare:` line. The settings are
the ones `superoffload train` takes under the same names (compare.sh passes both sides the
same values), so the two runs differ in the engine only.

Run it under a launcher that sets RANK/WORLD_SIZE/LOCAL_RANK (torchrun, deepspeed), or alone
for one process. DeepSpeed's SuperOffload needs CUDA; on a CPU-only machine
(DS_ACCELERATOR=cpu) only --super-offload false runs, which is how this script is checked
there.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time


def flag(text):
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="directory with the Hugging Face config.json")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--micro", type=int, default=4, help="train_micro_batch_size_per_gpu")
    p.add_argument("--steps", type=int, default=6, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the timing")
    p.add_argument("--clip", type=float, default=1.0, help="gradient_clipping (0: none)")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--ratio", type=float, default=0.9, help="offload_optimizer.ratio")
    p.add_argument("--cores-perc", type=float, default=0.9, help="offload_optimizer.cpuadam_cores_perc")
    p.add_argument("--sub-group-size", type=int, default=100_000_000)
    p.add_argument("--reduce-bucket-size", type=int, default=50_000_000)
    p.add_argument("--prefetch-bucket-size", type=int, default=50_000_000)
    p.add_argument("--persistence-threshold", type=int, default=100_000)
    p.add_argument("--bf16", type=flag, default=True)
    p.add_argument("--super-offload", type=flag, default=True)
    p.add_argument("--checkpointing", type=flag, default=True, help="activation checkpointing")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", help="also write the result here")
    args = p.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.seq < 1 or args.micro < 1:
        p.error("--steps, --seq and --micro must be positive and --warmup not negative")
    return args


def deepspeed_config(args, world_size):
    # The keys and values a SuperOffload example uses, with this run's sizes.
    return {
        "train_micro_batch_size_per_gpu": args.micro,
        "gradient_accumulation_steps": 1,
        "train_batch_size": args.micro * world_size,
        "gradient_clipping": args.clip,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
        "bf16": {"enabled": args.bf16},
        "optimizer": {"type": "AdamW",
                      "params": {"lr": args.lr, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
        "zero_optimization": {
            "stage": 3,
            "overlap_comm": True,
            "contiguous_gradients": True,
            "sub_group_size": args.sub_group_size,
            "reduce_bucket_size": args.reduce_bucket_size,
            "stage3_prefetch_bucket_size": args.prefetch_bucket_size,
            "stage3_param_persistence_threshold": args.persistence_threshold,
            "offload_optimizer": {
                "device": "cpu",
                "pin_memory": True,
                "ratio": args.ratio,
                "super_offload": args.super_offload,
                "cpuadam_cores_perc": args.cores_perc,
            },
        },
    }


def main():
    args = parse_args()
    import torch
    import deepspeed
    import transformers
    from deepspeed.accelerator import get_accelerator

    # One process without a launcher: a world of one.
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", "29517")):
        os.environ.setdefault(key, value)
    accelerator = get_accelerator()
    deepspeed.init_distributed(dist_backend=accelerator.communication_backend_name())
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    if accelerator.device_name() != "cpu":
        accelerator.set_device(local_rank)
    if args.super_offload and accelerator.device_name() != "cuda":
        sys.exit(f"ds_train.py: DeepSpeed's SuperOffload needs CUDA (this accelerator is {accelerator.device_name()}); "
                 "pass --super-offload false")
    torch.manual_seed(args.seed)
    config = deepspeed_config(args, world)
    hf_config = transformers.AutoConfig.from_pretrained(args.model)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    # Parameters are partitioned as they are made, as HF Trainer's ZeRO-3 does: with this object
    # alive, from_config builds under deepspeed.zero.Init and gathers each module to initialise it.
    from transformers.integrations import HfDeepSpeedConfig
    hf_deepspeed = HfDeepSpeedConfig(config)  # noqa: F841 (must stay referenced)
    model = transformers.AutoModelForCausalLM.from_config(hf_config, torch_dtype=dtype)
    if args.checkpointing:
        model.gradient_checkpointing_enable()
    model.config.use_cache = False
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    parameters = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())

    device = torch.device(accelerator.device_name(), local_rank) if accelerator.device_name() != "cpu" else "cpu"
    generator = torch.Generator().manual_seed(args.seed + rank)
    times, norms = [], []
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(0, hf_config.vocab_size, (args.micro, args.seq), generator=generator).to(device)
        accelerator.synchronize()
        start = time.perf_counter()
        loss = engine(input_ids=tokens, labels=tokens).loss
        engine.backward(loss)
        engine.step()
        accelerator.synchronize()
        elapsed = time.perf_counter() - start
        norm = engine.get_global_grad_norm()
        norms.append(float(norm) if norm is not None else float("nan"))
        if step >= args.warmup:
            times.append(elapsed)
        if rank == 0:
            print(f"step {step + 1}: loss {loss.item():.4f}, grad norm {norms[-1]:.3f}, {elapsed * 1e3:.1f} ms", flush=True)

    mean_s = statistics.mean(times)
    result = {
        "deepspeed": deepspeed.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": accelerator.device_name(),
        "mode": "superoffload" if args.super_offload else "zero-offload",
        "parameters": parameters,
        "world_size": world,
        "seq": args.seq,
        "micro": args.micro,
        "clip": args.clip,
        "clipped_steps": sum(1 for n in norms if args.clip > 0 and n > args.clip),
        "mean_step_ms": mean_s * 1e3,
        "median_step_ms": statistics.median(times) * 1e3,
        "tokens_per_s": args.micro * args.seq * world / mean_s,
        # Allocated, as superoffload's /train/device_peak_bytes; NaN without a GPU.
        "device_peak_bytes": float(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else float("nan"),
        "host_peak_rss_bytes": float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
    }
    if rank == 0:
        print("deepspeed_compare: " + " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                                               for k, v in result.items()), flush=True)
        if args.json:
            with open(args.json, "w") as out:
                json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
