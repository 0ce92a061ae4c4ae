#!/usr/bin/env python3
"""Expert parallelism (#49) on the CPU: `superoffload train` at world 4 with [moe]
expert_parallel_size 2 and 4 against the same run without it, over several steps — losses,
gradient norms, the aux loss and every weight at the end (exported to safetensors) equal to
fp32 round-off.

All runs see the same batches on the same ranks (expert parallelism does not change data
parallelism); only where each expert is computed, and the order of the gradient sums, differ.
Cases (--case):
  qwen3_moe  Qwen3-MoE with its aux loss (4 experts, per-expert tensors, one dense layer)
  mixtral    Mixtral with its aux loss (4 experts, w1/w3/w2)
  gpt_oss    GPT-OSS with its aux loss (4 experts stacked in 3-D tensors with biases, sinks)
  resume     Qwen3-MoE: expert_parallel_size 2 for 2 steps, then 4 from its checkpoint to step
             4, and from 4 ranks to 2 at EP 2, against no expert parallelism throughout; and
             expert parallelism combined with Ulysses sequence parallelism 2 and MLP tiles; all
             validate on a held-out share every 2 steps (eval losses compared too)
  refusals   an expert_parallel_size that does not divide the world or the experts: refused at
             start-up with the numbers named; a dense model ignores it with a warning

A wrong exchange (a pair sent to another expert's rank, outputs back in the wrong order, an
expert's gradient reduced across the wrong ranks) moves the loss by 1e-3 or more within two
steps; a skipped replica reduction leaves the weights of the experts apart by 1e-4 or more."""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_parity  # noqa: E402  (the tiny HF models)
import sequence_parallel_parity  # noqa: E402
from sequence_parallel_parity import compare, hdf5_rows, weights  # noqa: E402

WORLD, STEPS = sequence_parallel_parity.WORLD, sequence_parallel_parity.STEPS

# Four experts, so that 2 and 4 ranks split them; the aux loss on in every family.
hf_parity.ARCHITECTURES["mixtral_ep"] = (
    "MixtralConfig", "MixtralForCausalLM",
    dict(num_local_experts=4, num_experts_per_tok=2, output_router_logits=True, router_aux_loss_coef=0.02))


def run(args, name, model_dir, data, tmp, ep, extra=(), expect_ok=True, steps=STEPS, sp=1, world=WORLD):
    """sequence_parallel_parity's run (the same training settings) at expert_parallel_size `ep`."""
    return sequence_parallel_parity.run(args, name, model_dir, data, tmp, sp,
                                        ["--set", f"moe.expert_parallel_size={ep}", *extra], expect_ok, steps, world)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", required=True, choices=["qwen3_moe", "mixtral", "gpt_oss", "resume", "refusals"])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--mpiexec", default="mpiexec")
    args = parser.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        arch = {"qwen3_moe": "qwen3_moe_aux", "mixtral": "mixtral_ep", "gpt_oss": "gpt_oss_aux",
                "resume": "qwen3_moe_aux", "refusals": "qwen3_moe"}[args.case]
        model_dir = os.path.join(tmp, "model")
        _, config = hf_parity.build(arch, model_dir)
        data = hdf5_rows(tmp, config.vocab_size)

        if args.case == "refusals":
            rc, log = run(args, "refused_world", model_dir, data, tmp, 3, expect_ok=False)
            assert rc != 0 and "expert_parallel_size = 3" in log and "does not divide the world size 4" in log, \
                log[-3000:]
            # The 6 experts of this Qwen3-MoE do not divide among 4 ranks.
            rc, log = run(args, "refused_experts", model_dir, data, tmp, 4, expect_ok=False)
            assert rc != 0 and "6 experts, which do not divide among 4 expert-parallel ranks" in log, log[-3000:]
            assert "signal" not in log.lower().replace("stop_signal", ""), log[-3000:]
            # A dense model trains, ignoring the setting, and says so.
            dense_dir = os.path.join(tmp, "dense")
            hf_parity.build("llama", dense_dir)
            history, log = run(args, "dense", dense_dir, data, tmp, 2, steps=1)
            assert "expert_parallel_size = 2 is ignored: the model has no mixture-of-experts layer" in log, log[-3000:]
            print("refusals: expert_parallel_size that does not divide the world or the experts is refused, "
                  "naming the numbers; a dense model ignores it with a warning")
            return

        # The resume case also validates on a held-out share every 2 steps: evaluation's forwards
        # exchange tokens too (every rank runs the same number of them).
        evaluation = (["--set", "data.eval_fraction=0.25", "--set", "training.eval_every_steps=2"]
                      if args.case == "resume" else [])
        reference, _ = run(args, "ep1", model_dir, data, tmp, 1, evaluation)
        print(f"{args.case}: no expert parallelism, loss by step {['%.6f' % v for v in reference['loss']]}, "
              f"aux {['%.6f' % v for v in reference['aux_loss']]}")
        ref_weights = weights(args, tmp, "ep1")
        if args.case == "resume":
            run(args, "resumed", model_dir, data, tmp, 2, evaluation, steps=2)
            second, log = run(args, "resumed", model_dir, data, tmp, 4, evaluation)
            assert "resumed from" in log and "expert parallelism: 1 group(s) of 4" in log, log[-3000:]
            assert list(second["step"]) == [1, 2, 3, 4], second["step"]
            compare("resume: EP 2 for steps 1-2, EP 4 for 3-4 vs none", reference, second, failures,
                    ref_weights, weights(args, tmp, "resumed"))
            shown = subprocess.run([args.bin, "inspect", os.path.join(tmp, "resumed")], capture_output=True, text=True)
            assert "experts split 4 ways" in shown.stdout, shown.stdout + shown.stderr
            # And at another world size: EP 2 on 4 ranks, then EP 2 on 2 (the same 8 samples a
            # step, cut into 2 accumulation steps).
            run(args, "two_ranks", model_dir, data, tmp, 2, evaluation, steps=2)
            third, log = run(args, "two_ranks", model_dir, data, tmp, 2, evaluation, world=2)
            assert "resumed from" in log and "(resharded)" in log, log[-3000:]
            compare("resume: EP 2 on 4 ranks for steps 1-2, on 2 ranks for 3-4 vs none", reference, third, failures,
                    ref_weights, weights(args, tmp, "two_ranks"))
            combined, log = run(args, "with_sp", model_dir, data, tmp, 2, ["--set", "model.tile_tokens=16", *evaluation],
                                sp=2)
            assert "sequence parallelism (Ulysses)" in log and "MLP tiles: 16 tokens" in log, log[-3000:]
            # Sequence parallelism cuts the batch differently (2 replicas x 2 accumulation steps):
            # the same samples per step, so the same losses to round-off.
            compare("EP 2 + SP 2 + MLP tiles vs none", reference, combined, failures, ref_weights,
                    weights(args, tmp, "with_sp"))
        else:
            for ep in (2, 4):
                ours, log = run(args, f"ep{ep}", model_dir, data, tmp, ep)
                assert f"expert parallelism: {WORLD // ep} group(s) of {ep}" in log, log[-3000:]
                compare(f"{args.case}: EP {ep} vs none", reference, ours, failures, ref_weights,
                        weights(args, tmp, f"ep{ep}"))
    if failures:
        sys.exit(f"{args.case}: expert-parallel runs differ: {failures}")


if __name__ == "__main__":
    main()
