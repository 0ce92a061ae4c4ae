#!/usr/bin/env python3
"""Training against HuggingFace transformers: `superoffload train` on 2 ranks against the HF
model trained in PyTorch, step for step, for one architecture of the plugins.

Both start from the same tiny random HF model (hf_parity.build: weights perturbed so that
biases and norm scales matter) and train K steps in fp32 on the same rows per step, rank and
micro-batch (2 ranks x 2 micro-batches x 2 rows, the sampler without shuffling), with AdamW
(weight decay 0.1 on the tensors HF Trainer decays: Trainer.get_decay_parameter_names),
gradient clipping that cuts every step (torch.nn.utils.clip_grad_norm_), a constant learning
rate and no dropout. The reference's objective is what superoffload documents and HF computes
per forward pass: every predicted token of the global batch weighs the same, and each micro-
batch adds router_aux_loss_coef x its load-balancing loss (HF's aux_loss, which pools every MoE
layer of the pass) divided by the micro-batches of the step. The embedding's pad row (HF's
padding_idx) appears in the data and must get no gradient from the lookup.

Compared each step: the loss, the gradient norm before clipping and, for MoE runs with
output_router_logits, the aux loss; at the end: every weight (superoffload's checkpoint,
exported to safetensors).

Tolerances. The reference runs twice, in fp32 (as superoffload) and in fp64. How far HF's own
fp32 run lies from its fp64 run says what round-off alone does to each quantity; superoffload
must lie within 8x that distance of the fp64 run, or within a floor where HF's fp32 run
happens to be closer than round-off can promise (loss 2e-6 and grad norm 2e-5 relative, weights
2e-6 absolute: about 8 ulp of the loss, a few ulp of a sum over every gradient, 1/500 of one
step's update at lr 1e-3). Weights have one more floor: twice the largest distance of any
tensor in HF's own fp32 run. Adam divides each gradient by its own magnitude, so an element
whose gradient is near zero amplifies round-off up to a whole update (lr); which tensor holds
such an element is chance, and HF's fp32 run samples it once (on an AMD EPYC with AVX2,
Llama's up_proj lay 2.0e-6 from fp64 here against 2.3e-7 in HF's run, while HF's worst tensor
lay 2.8e-6 away). So the fp64 run marks, per tensor, the elements whose gradient at some step
was not zero but below 1e-4 of the tensor's gradient RMS: there fp32 round-off of the gradient (1e-7 of the
terms summed) is a percent of the gradient itself, and Adam's first step, lr * g / (|g| + eps),
passes a share of it on (on a Sapphire Rapids, one element of Qwen3's q_proj had a gradient
1.2e-5 of the RMS at step 1 and lay 9.3e-6 from fp64, every other element within HF's own
distance). Those elements are held to a tenth of one update (1e-4) instead, and their count is
printed; a rule applied wrongly moves every element of a tensor, never only these. A difference in what training means (a decayed bias, a pad row that moves, a
per-layer instead of pooled aux loss) moves weights by 2e-5 or more in 4 steps (a 0.1 bias
decayed: 4e-5) and the aux loss by percents, far beyond these bounds. The figures are printed
every run.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_parity  # noqa: E402  (the architectures and the model builder of the logits parity)

RANKS, MICRO, ACCUMULATION, SEQ, STEPS = 2, 2, 2, 16, 4
LR, WEIGHT_DECAY, CLIP = 1e-3, 0.1, 0.05
PAD = 3  # pad_token_id of the families whose HF embedding has a padding_idx

# name: (architecture in hf_parity, extra config for training)
CASES = {
    "llama": ("llama", {}),
    "llama3": ("llama3", {}),  # tied head, attention and MLP biases
    "mistral": ("mistral", {}),
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", {}),
    "phi3": ("phi3", {}),
    "seed_oss": ("seed_oss", dict(attention_dropout=0.0, residual_dropout=0.0)),
    "gpt2": ("gpt2", dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    "qwen3_moe": ("qwen3_moe", {}),
    "qwen3_moe_aux": ("qwen3_moe_aux", {}),
    "mixtral": ("mixtral", {}),
    "mixtral_aux": ("mixtral_aux", {}),  # trained without activation checkpointing (below)
    "gpt_oss": ("gpt_oss", {}),
    "gpt_oss_aux": ("gpt_oss_aux", {}),
}

# The engine's other path: every layer's graph kept from forward to backward (the router
# statistics too), instead of recomputed in backward.
NO_CHECKPOINTING = {"mixtral_aux", "llama3"}


def build_model(case, directory):
    arch, extra = CASES[case]
    config_class, model_class, base_extra = hf_parity.ARCHITECTURES[arch]
    if config_class != "GPT2Config":
        extra = {**extra, "pad_token_id": PAD}
    hf_parity.ARCHITECTURES[arch] = (config_class, model_class, {**base_extra, **extra})
    model, config = hf_parity.build(arch, directory)
    return model, config


def make_rows(vocab, seed=11):
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, vocab, (STEPS * RANKS * MICRO * ACCUMULATION, SEQ + 1), generator=generator)
    rows[:, 5] = PAD  # the pad token in every row (HF: its embedding row gets no gradient)
    return rows


def micro_batches(rows, step):
    """The global batch of `step` as superoffload's sampler cuts it without shuffling: rank r's
    micro-batch m holds rows [(m * ranks + r) * micro, +micro) of the batch."""
    size = RANKS * MICRO * ACCUMULATION
    batch = rows[step * size:(step + 1) * size]
    for m in range(ACCUMULATION):
        for r in range(RANKS):
            start = (m * RANKS + r) * MICRO
            yield batch[start:start + MICRO]


ILL_CONDITIONED = 1e-4  # an element's gradient below this share of its tensor's RMS (see above)


def train_reference(model, config, rows, dtype, ill_conditioned=None):
    """HF's training of the same batches; with `ill_conditioned` (a dict), it is filled with a
    boolean mask per parameter name: the elements whose gradient fell below ILL_CONDITIONED of
    the tensor's gradient RMS at some step."""
    model = model.to(dtype)
    model.train()
    if hasattr(model, "set_experts_implementation") and getattr(config, "num_experts_per_tok", None):
        model.set_experts_implementation("eager")  # the grouped-GEMM default has no fp64
    decay = set(transformers.Trainer.get_decay_parameter_names(None, model))
    params = dict(model.named_parameters())
    groups = [{"params": [p for n, p in params.items() if n in decay], "weight_decay": WEIGHT_DECAY},
              {"params": [p for n, p in params.items() if n not in decay], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    aux_on = bool(getattr(config, "output_router_logits", False))
    history = {"loss": [], "grad_norm": [], "aux_loss": []}
    for step in range(STEPS):
        optimizer.zero_grad()
        batches = list(micro_batches(rows, step))
        total_tokens = sum(b[:, 1:].numel() for b in batches)
        loss_sum, aux_sum = 0.0, 0.0
        for b in batches:
            kwargs = {"output_router_logits": True} if aux_on else {}
            out = model(input_ids=b[:, :-1], **kwargs)
            logits = out.logits
            ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), b[:, 1:].reshape(-1),
                                                   reduction="sum")
            objective = ce / total_tokens
            if aux_on:
                objective = objective + config.router_aux_loss_coef * out.aux_loss / len(batches)
                aux_sum += out.aux_loss.item()
            objective.backward()
            loss_sum += ce.item()
        if ill_conditioned is not None:
            for name, p in params.items():
                if p.grad is None:
                    continue
                # A gradient of exactly zero (a token or expert the batch never used) has no
                # round-off: such elements stay under the tight bound, decay alone moves them.
                magnitude = p.grad.abs()
                small = (magnitude > 0) & (magnitude < ILL_CONDITIONED * p.grad.pow(2).mean().sqrt())
                ill_conditioned[name] = ill_conditioned[name] | small if name in ill_conditioned else small
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        history["loss"].append(loss_sum / total_tokens)
        history["grad_norm"].append(norm.item())
        history["aux_loss"].append(aux_sum / len(batches) if aux_on else float("nan"))
    return history, model


def train_superoffload(args, model_dir, rows, tmp):
    data = os.path.join(tmp, "rows.h5")
    with h5py.File(data, "w") as f:
        f["tokens"] = rows.numpy().astype(np.uint32)
    config = os.path.join(tmp, "train.toml")
    with open(config, "w") as f:
        f.write(f"""
[model]
path = "{model_dir}"
init = "pretrained"
[data]
path = "{data}"
format = "hdf5"
seq_len = {SEQ}
shuffle = false
[training]
output_dir = "{tmp}/run"
train_micro_batch_size_per_gpu = {MICRO}
gradient_accumulation_steps = {ACCUMULATION}
gradient_clipping = {CLIP}
max_steps = {STEPS}
activation_checkpointing = {"false" if args.case in NO_CHECKPOINTING else "true"}
[optimizer]
lr = {LR}
weight_decay = {WEIGHT_DECAY}
[lr_schedule]
type = "constant"
warmup_num_steps = 0
[checkpoint]
every_steps = {STEPS}
[precision]
bf16 = false
[metrics]
tensorboard = true
csv = true
[runtime]
device = "cpu"
""")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [args.mpiexec, "-np", str(RANKS), "--oversubscribe", args.bin, "train", config]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    if result.returncode != 0:
        sys.exit(f"superoffload train failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    log = (result.stdout + result.stderr).splitlines()
    exported = os.path.join(tmp, "exported")
    result = subprocess.run([args.bin, "export", os.path.join(tmp, "run"), "--to", exported, "--dtype", "fp32"],
                            capture_output=True, text=True, timeout=300, env=env)
    if result.returncode != 0:
        sys.exit(f"superoffload export failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    with h5py.File(os.path.join(tmp, "run", "metrics.h5"), "r") as f:
        history = {name: list(f["train"][name][...]) for name in ("loss", "grad_norm", "aux_loss")}
    # DeepSpeed's CSV monitor (TensorBoard writes the same series): the aux loss only where it exists.
    monitor = os.path.join(tmp, "run", "superoffload", "Train_Samples_aux_loss.csv")
    if np.isnan(history["aux_loss"]).all():
        assert not os.path.exists(monitor), "a run without the aux loss wrote its monitor series"
    else:
        with open(monitor) as f:
            rows = [line.strip().split(",") for line in f]
        assert rows[0] == ["step", "aux_loss"], rows[0]
        assert [float(r[1]) for r in rows[1:]] == history["aux_loss"], (rows, history["aux_loss"])
    return history, saved_weights(exported), [l for l in log if "Step " in l and " | Loss " in l]


def saved_weights(directory, model=None):
    """The tensors of a HF directory (after saving `model` there): checkpoint names, which HF's
    in-memory names differ from for fused experts (transformers 5 fuses them on load)."""
    from safetensors.torch import load_file
    if model is not None:
        model.save_pretrained(directory, safe_serialization=True)
    weights = {}
    for name in os.listdir(directory):
        if name.endswith(".safetensors"):
            weights.update({n: t.to(torch.float64) for n, t in load_file(os.path.join(directory, name)).items()})
    return weights


def relative(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b)) / np.abs(np.asarray(b))))


def weight_distance(a, b, names):
    return max(float((a[n] - b[n]).abs().max()) for n in names)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    parser.add_argument("--bin", required=True, help="path to build/bin/superoffload")
    parser.add_argument("--mpiexec", default="mpiexec")
    args = parser.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "model")
        model, config = build_model(args.case, model_dir)
        initial = saved_weights(model_dir)
        rows = make_rows(config.vocab_size)
        ours, our_weights, step_lines = train_superoffload(args, model_dir, rows, tmp)
        assert step_lines, "no step line in the training log"
        aux_shown = all(" | Aux loss " in l for l in step_lines)
        assert aux_shown == bool(getattr(config, "output_router_logits", False)), step_lines[-1]
        fp32, trained = train_reference(hf_parity.build(CASES[args.case][0], os.path.join(tmp, "m32"))[0],
                                        config, rows, torch.float32)
        fp32_weights = saved_weights(os.path.join(tmp, "trained32"), trained)
        ill_conditioned = {}
        fp64, trained = train_reference(model, config, rows, torch.float64, ill_conditioned)
        fp64_weights = saved_weights(os.path.join(tmp, "trained64"), trained)

        names = sorted(fp64_weights)
        missing = [n for n in names if n not in our_weights and not n.startswith("lm_head")]
        assert not missing, f"the export lacks {missing}"
        names = [n for n in names if n in our_weights]
        failures = []

        def check(what, ours_gap, hf_gap, floor):
            bound = max(8 * hf_gap, floor)
            verdict = "ok" if ours_gap <= bound else "FAIL"
            print(f"{args.case}: {what}: superoffload vs HF fp64 {ours_gap:.2e}, HF fp32 vs fp64 {hf_gap:.2e}, "
                  f"bound {bound:.2e} {verdict}")
            if ours_gap > bound:
                failures.append(what)

        print(f"{args.case}: loss by step {['%.6f' % v for v in ours['loss']]} (HF fp64 "
              f"{['%.6f' % v for v in fp64['loss']]}), grad norm {['%.5f' % v for v in ours['grad_norm']]}")
        assert all(n > CLIP for n in fp64["grad_norm"]), "clipping must cut every step"
        check("loss (relative)", relative(ours["loss"], fp64["loss"]), relative(fp32["loss"], fp64["loss"]), 2e-6)
        check("grad norm (relative)", relative(ours["grad_norm"], fp64["grad_norm"]),
              relative(fp32["grad_norm"], fp64["grad_norm"]), 2e-5)
        if getattr(config, "output_router_logits", False):
            print(f"{args.case}: aux loss by step {['%.6f' % v for v in ours['aux_loss']]} "
                  f"(HF fp64 {['%.6f' % v for v in fp64['aux_loss']]})")
            check("aux loss (relative)", relative(ours["aux_loss"], fp64["aux_loss"]),
                  relative(fp32["aux_loss"], fp64["aux_loss"]), 2e-6)
        else:
            assert all(np.isnan(ours["aux_loss"])), "aux_loss must be NaN without output_router_logits"
        # Weights tensor by tensor: a norm or a bias (few elements, little round-off) is held to
        # its own distance, so that a decay or pad-row rule applied wrongly to it shows.
        # Checkpoint names equal HF's in-memory names except for fused experts, which then go
        # without a mask (all their elements held to the tight bound).
        def well(n, difference):
            mask = ill_conditioned.get(n)
            if mask is None or mask.shape != difference.shape or not bool(mask.any()):
                return difference
            kept = difference[~mask]
            return kept if kept.numel() else difference.new_zeros(1)

        ratios = {}
        hf_worst = max(float(well(n, (fp32_weights[n] - fp64_weights[n]).abs()).max()) for n in names)
        ill_worst, ill_count = 0.0, 0
        for n in names:
            difference = (our_weights[n] - fp64_weights[n]).abs()
            gap = float(well(n, difference).max())
            hf_gap = float(well(n, (fp32_weights[n] - fp64_weights[n]).abs()).max())
            ratios[n] = (gap / max(8 * hf_gap, 2 * hf_worst, 2e-6), gap, hf_gap)
            mask = ill_conditioned.get(n)
            if mask is not None and mask.shape == difference.shape and bool(mask.any()):
                ill_count += int(mask.sum())
                ill_worst = max(ill_worst, float(difference[mask].max()))
        print(f"{args.case}: weights: {ill_count} element(s) with a near-zero gradient at some step "
              f"(below {ILL_CONDITIONED:g} of their tensor's RMS): superoffload vs HF fp64 up to {ill_worst:.2e}, "
              f"bound {0.1 * LR:.0e}")
        if ill_worst > 0.1 * LR:
            failures.append("weight elements with a near-zero gradient")
        worst = max(ratios, key=lambda n: ratios[n][0])
        print(f"{args.case}: weights: worst tensor {worst}: superoffload vs HF fp64 {ratios[worst][1]:.2e}, "
              f"HF fp32 vs fp64 {ratios[worst][2]:.2e} ({ratios[worst][0]:.2f} of its bound); largest difference "
              f"{weight_distance(our_weights, fp64_weights, names):.2e} (HF fp32 "
              f"{weight_distance(fp32_weights, fp64_weights, names):.2e})")
        bad = [n for n in names if ratios[n][0] > 1]
        if bad:
            failures.append(f"{len(bad)} weight tensor(s), e.g. " + ", ".join(bad[:4]))
        moved = weight_distance(fp64_weights, initial, names)
        print(f"{args.case}: training moved the weights by up to {moved:.2e}")
        assert moved > 100 * 2e-6, "the weights barely moved: the comparison would prove nothing"

        embedding = next((n for n in names if n.endswith("embed_tokens.weight")), None)
        if embedding and not getattr(config, "tie_word_embeddings", False):
            # No gradient: only decay moves the pad row, by the factor (1 - lr * wd) per step.
            expected = initial[embedding][PAD] * (1 - LR * WEIGHT_DECAY) ** STEPS
            gap = float((our_weights[embedding][PAD] - expected).abs().max())
            print(f"{args.case}: pad row {PAD} moved only by weight decay: |difference| {gap:.1e}")
            if gap > 1e-6:
                failures.append("pad row")
        if failures:
            sys.exit(f"{args.case}: superoffload's training differs from HF transformers in: {', '.join(failures)}")


if __name__ == "__main__":
    main()
