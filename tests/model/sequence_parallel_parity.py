#!/usr/bin/env python3
"""Ulysses sequence parallelism (#50) on the CPU: `superoffload train` at world 4 with
[parallel] sequence_parallel_size 2 and 4 against the same run with 1, over several steps —
losses, gradient norms, the MoE aux loss and every weight at the end (exported to
safetensors) equal to fp32 round-off.

The three runs see the same global batches: 8 rows per step, cut as 4 replicas x 2 rows (SP 1),
2 x 2 x 2 accumulation steps (SP 2) or 1 x 2 x 4 (SP 4); only the order of the sums differs.
Cases (--case):
  llama     Llama (GQA: 4 heads, 2 key/value heads, split at SP 2, replicated at SP 4)
  qwen3     Qwen3 (per-head q/k RMSNorm, tied head)
  gpt_oss   GPT-OSS with its aux loss (sinks, sliding window 6 across shards of 16, the
            routers' statistics pooled over the group as HF pools them over the row)
  packed    a packed Alpaca file (document attention: boundaries inside and across shards),
            Llama with the tiny byte-level tokenizer
  combined  activation offload + MLP tiles + SP 2 against none of them, and a resume: SP 2
            for 2 steps, then SP 4 from its checkpoint to step 4, against SP 1 throughout; all
            three validate on a held-out share every 2 steps (eval losses compared too)
  refusals  sequence_parallel_size that does not divide the world, seq_len or the heads:
            refused at start-up with the numbers named

Adam's eps is 1e-6 (as in cli_packing): an element whose true gradient cancels to ~1e-10
would otherwise move by the sign of its round-off on the first step. A wrong exchange (a head
or shard out of place, a position restarting per shard, an aux loss per shard) moves the loss
by 1e-3 or more on the first step."""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_parity  # noqa: E402  (the tiny HF models)

WORLD, SEQ, STEPS = 4, 64, 4
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOSS_BOUND, NORM_BOUND, WEIGHT_BOUND = 2e-6, 2e-5, 2e-6


def run(args, name, model_dir, data, tmp, sp, extra=(), expect_ok=True, steps=STEPS, world=WORLD):
    config = os.path.join(tmp, f"{name}.toml")
    fmt = "hdf5" if data.endswith(".h5") else "alpaca"
    with open(config, "w") as f:
        f.write(f"""
[model]
path = "{model_dir}"
init = "{'pretrained' if fmt == 'hdf5' else 'random'}"
[data]
path = "{data}"
format = "{fmt}"
seq_len = {SEQ}
shuffle = false
packing = {'true' if fmt == 'alpaca' else 'false'}
prompt_template_no_input = "Q: {{instruction}}\\nA: "
[training]
output_dir = "{tmp}/{name}"
train_batch_size = 8
train_micro_batch_size_per_gpu = 2
gradient_clipping = 0.5
max_steps = {steps}
[optimizer]
lr = 1e-3
eps = 1e-6
weight_decay = 0.1
[lr_schedule]
type = "constant"
warmup_num_steps = 0
[checkpoint]
every_steps = 2
[precision]
bf16 = false
[parallel]
sequence_parallel_size = {sp}
[runtime]
device = "cpu"
""")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [args.mpiexec, "-np", str(world), "--oversubscribe", args.bin, "train", config, *extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    log = result.stdout + result.stderr
    if not expect_ok:
        return result.returncode, log
    if result.returncode != 0:
        sys.exit(f"{name}: superoffload train failed ({result.returncode}):\n{log[-4000:]}")
    with h5py.File(os.path.join(tmp, name, "metrics.h5"), "r") as f:
        history = {k: np.asarray(f["train"][k][...], dtype=np.float64) for k in ("step", "loss", "grad_norm", "aux_loss")}
        if "eval" in f and len(f["eval"]["loss"]) > 0:  # the group exists, empty, without validation
            history["eval_loss"] = np.asarray(f["eval"]["loss"][...], dtype=np.float64)
    return history, log


def weights(args, tmp, name):
    exported = os.path.join(tmp, name + "_exported")
    result = subprocess.run([args.bin, "export", os.path.join(tmp, name), "--to", exported, "--dtype", "fp32"],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"export of {name} failed:\n{result.stdout}\n{result.stderr}")
    from safetensors.torch import load_file
    out = {}
    for f in os.listdir(exported):
        if f.endswith(".safetensors"):
            out.update({n: t.to(torch.float64) for n, t in load_file(os.path.join(exported, f)).items()})
    return out


def compare(label, reference, ours, failures, ref_weights=None, our_weights=None):
    loss = float(np.max(np.abs(ours["loss"] / reference["loss"] - 1)))
    norm = float(np.max(np.abs(ours["grad_norm"] / reference["grad_norm"] - 1)))
    line = f"{label}: loss {loss:.1e}, grad norm {norm:.1e} (relative)"
    ok = loss <= LOSS_BOUND and norm <= NORM_BOUND
    if not np.isnan(reference["aux_loss"]).all():
        aux = float(np.max(np.abs(ours["aux_loss"] / reference["aux_loss"] - 1)))
        line += f", aux loss {aux:.1e}"
        ok = ok and aux <= LOSS_BOUND
    if "eval_loss" in reference:
        assert len(ours["eval_loss"]) == len(reference["eval_loss"]) >= 2, (ours["eval_loss"], reference["eval_loss"])
        gap = float(np.max(np.abs(ours["eval_loss"] / reference["eval_loss"] - 1)))
        line += f", eval loss {gap:.1e}"
        ok = ok and gap <= LOSS_BOUND
    if ref_weights is not None:
        assert sorted(ref_weights) == sorted(our_weights), "the exports hold different tensors"
        gap = max(float((ref_weights[n] - our_weights[n]).abs().max()) for n in ref_weights)
        line += f", weights {gap:.1e} (absolute)"
        ok = ok and gap <= WEIGHT_BOUND
    print(line + ("" if ok else "  FAIL"))
    if not ok:
        failures.append(label)


def hdf5_rows(tmp, vocab):
    generator = torch.Generator().manual_seed(3)
    rows = torch.randint(0, vocab, (STEPS * 8, SEQ + 1), generator=generator)
    path = os.path.join(tmp, "rows.h5")
    with h5py.File(path, "w") as f:
        f["tokens"] = rows.numpy().astype(np.uint32)
    return path


def alpaca(tmp):
    """A tiny Llama with the demo's byte-level tokenizer, and instruction records that pack
    several to a row."""
    model_dir = os.path.join(tmp, "packed_model")
    shutil.copytree(os.path.join(SOURCE, "configs", "models", "tiny-llama"), model_dir)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    config.update(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f)
    rng = random.Random(5)
    words = "the fox owl cat runs jumps over a lazy dog and sleeps under tree in park".split()
    path = os.path.join(tmp, "alpaca.jsonl")
    with open(path, "w") as f:
        for _ in range(160):
            phrase = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 5)))
            f.write(json.dumps({"instruction": f"Say {phrase}", "input": "", "output": phrase}) + "\n")
    return model_dir, path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", required=True, choices=["llama", "qwen3", "gpt_oss", "packed", "combined", "refusals"])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--mpiexec", default="mpiexec")
    args = parser.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.case == "packed":
            model_dir, data = alpaca(tmp)
        else:
            arch = {"llama": "llama", "qwen3": "qwen3", "gpt_oss": "gpt_oss_aux"}.get(args.case, "llama")
            model_dir = os.path.join(tmp, "model")
            _, config = hf_parity.build(arch, model_dir)
            data = hdf5_rows(tmp, config.vocab_size)

        if args.case == "refusals":
            for sp, words in ((3, ["sequence_parallel_size = 3", "does not divide the world size 4"]),
                              (8, ["sequence_parallel_size = 8", "does not divide the world size 4"])):
                rc, log = run(args, f"refused{sp}", model_dir, data, tmp, sp, expect_ok=False)
                assert rc != 0 and all(w in log for w in words), f"SP {sp} not refused as expected:\n{log[-3000:]}"
            rc, log = run(args, "refused_seq", model_dir, data, tmp, 4, ["--set", "data.seq_len=66"], expect_ok=False)
            assert rc != 0 and "does not divide [data] seq_len = 66" in log, log[-3000:]
            # Heads: 4 query heads over 4 ranks is fine; 2 are not (kv heads replicated is fine).
            with open(os.path.join(model_dir, "config.json")) as f:
                config = json.load(f)
            config.update(num_attention_heads=2, num_key_value_heads=1, head_dim=32)
            with open(os.path.join(model_dir, "config.json"), "w") as f:
                json.dump(config, f)
            rc, log = run(args, "refused_heads", model_dir, data, tmp, 4, ["--set", "model.init=\"random\""],
                          expect_ok=False)
            assert rc != 0 and "2 attention heads do not divide among 4 sequence-parallel ranks" in log, log[-3000:]
            assert "Signal" not in log and "signal" not in log.lower().replace("stop_signal", ""), log[-3000:]
            print("refusals: world, seq_len and heads that do not divide are refused, naming the numbers")
            return

        # The combined case also validates (a held-out share, every 2 steps): eval runs sharded too.
        evaluation = (["--set", "data.eval_fraction=0.25", "--set", "training.eval_every_steps=2"]
                      if args.case == "combined" else [])
        reference, log = run(args, "sp1", model_dir, data, tmp, 1, evaluation)
        print(f"{args.case}: SP 1 loss by step {['%.6f' % v for v in reference['loss']]}")
        ref_weights = weights(args, tmp, "sp1")
        if args.case == "combined":
            combined, log = run(args, "all_three", model_dir, data, tmp, 2,
                                ["--set", "model.activation_offload=\"host\"", "--set", "model.tile_tokens=8", *evaluation])
            assert "MLP tiles: 8 tokens" in log and "activation offload" in log, log[-3000:]
            compare("combined: offload + tiles + SP 2 vs none", reference, combined, failures,
                    ref_weights, weights(args, tmp, "all_three"))
            # Resume at another sequence-parallel size: SP 2 to step 2, SP 4 from there.
            first, _ = run(args, "resumed", model_dir, data, tmp, 2, evaluation, steps=2)
            second, log = run(args, "resumed", model_dir, data, tmp, 4, evaluation)
            assert "resumed from" in log, log[-3000:]
            assert list(second["step"]) == [1, 2, 3, 4], second["step"]
            compare("resume: SP 2 for steps 1-2, SP 4 for 3-4 vs SP 1", reference, second, failures,
                    ref_weights, weights(args, tmp, "resumed"))
        else:
            for sp in (2, 4):
                ours, log = run(args, f"sp{sp}", model_dir, data, tmp, sp)
                assert f"sequence parallelism (Ulysses): {WORLD // sp} group(s) of {sp}" in log, log[-3000:]
                compare(f"{args.case}: SP {sp} vs SP 1", reference, ours, failures, ref_weights,
                        weights(args, tmp, f"sp{sp}"))
    if failures:
        sys.exit(f"{args.case}: sequence-parallel runs differ: {failures}")


if __name__ == "__main__":
    main()
