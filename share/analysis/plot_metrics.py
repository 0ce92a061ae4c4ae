#!/usr/bin/env python3
"""PNG plots of a superoffload metrics.h5: loss (with the eval loss of validation during
training drawn over it), throughput and TFLOPS over steps, the phase breakdown of a step, and
per-rank step times (stragglers stand out); for an LR range test also loss against lr on a
log axis, with the suggested lr marked and printed.

    plot_metrics.py runs/tiny/metrics.h5 [--out DIR]

Needs h5py and matplotlib (Debian: python3-h5py python3-matplotlib). Works on a file that a
run is still writing (SWMR read).
"""
import argparse
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")  # files only; no display on a cluster node
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

PHASES = ["forward_s", "backward_s", "gather_wait_s", "reduce_s", "d2h_s", "cpu_step_s", "device_step_s", "h2d_s",
          "optimizer_wait_s", "rollback_s"]


def suggest_lr(lr, loss):
    """The lr where the smoothed loss fell fastest against log(lr): the rule of
    src/train/lr_suggestion.cpp (`superoffload inspect` prints the same), step for step."""
    n = min(len(lr), len(loss))
    half = max(1, n // 10)
    smoothed = np.full(n, np.nan)
    for i in range(n):
        window = loss[max(0, i - half):min(n, i + half + 1)]
        window = window[np.isfinite(window)]
        if window.size:
            smoothed[i] = window.mean()
    used, lowest = 0, np.inf
    while used < n and np.isfinite(smoothed[used]) and lr[used] > 0 and smoothed[used] <= 4 * lowest:
        lowest = min(lowest, smoothed[used])
        used += 1
    best, at = 0.0, None
    for i in range(1, used - 1) if used >= 5 else ():
        below, above = max(0, i - half), min(used - 1, i + half)
        run = np.log(lr[above]) - np.log(lr[below])
        if run > 0:
            slope = (smoothed[above] - smoothed[below]) / run
            if slope < best:
                best, at = slope, i
    return smoothed, (lr[at] if at is not None else None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="metrics.h5 of a run")
    parser.add_argument("--out", help="directory for the PNGs (default: beside the metrics file)")
    args = parser.parse_args()
    out = args.out or os.path.dirname(os.path.abspath(args.metrics))
    os.makedirs(out, exist_ok=True)
    try:
        f = h5py.File(args.metrics, "r", swmr=True)
    except OSError as e:
        sys.exit(f"cannot open {args.metrics}: {e}\nHINT: on Lustre/GPFS without flock set HDF5_USE_FILE_LOCKING=FALSE")
    if "train/step" not in f or f["train/step"].shape[0] == 0:
        sys.exit(f"{args.metrics} has no steps yet")
    train = {name: f["train"][name][...] for name in f["train"]}
    step = train["step"]
    written = []

    def save(fig, name):
        path = os.path.join(out, name)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(step, train["loss"], label="training loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("Training loss")
    if "eval/step" in f and f["eval/step"].shape[0] > 0:
        eval_step, eval_loss = f["eval/step"][...], f["eval/loss"][...]
        ax.plot(eval_step, eval_loss, "o-", color="tab:orange", label="eval loss")
        finite = np.isfinite(eval_loss)
        if finite.any():
            best = int(np.nanargmin(np.where(finite, eval_loss, np.inf)))
            ax.plot(eval_step[best], eval_loss[best], "*", color="tab:red", markersize=12,
                    label=f"lowest eval loss {eval_loss[best]:.4g} (step {eval_step[best]:.0f})")
            print(f"eval loss: lowest {eval_loss[best]:.6g} after step {eval_step[best]:.0f}, "
                  f"last {eval_loss[finite][-1]:.6g} ({eval_step.size} evaluations)")
        ax.set_title("Training and eval loss")
    skipped = step[train["skipped"] > 0]
    if skipped.size:
        ax.plot(skipped, train["loss"][train["skipped"] > 0], "rx", label="skipped (non-finite)")
    ax.legend()
    save(fig, "loss.png")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    top.plot(step, train["tokens_per_s"])
    top.set_ylabel("tokens/s")
    top.set_title("Throughput")
    if "model_tflops_per_device" in train:
        bottom.plot(step, train["model_tflops_per_device"], color="tab:orange", label="model (MFU)")
        bottom.plot(step, train["hardware_tflops_per_device"], color="tab:green", label="hardware (HFU)")
        bottom.legend()
    else:  # metrics written before the split: the hardware figure
        bottom.plot(step, train["tflops"], color="tab:orange")
    bottom.set_ylabel("TFLOPS per device")
    bottom.set_xlabel("step")
    save(fig, "throughput.png")

    # Mean seconds per phase, leaving out the first step (start-up costs).
    rows = slice(1, None) if step.size > 1 else slice(None)
    means = [float(np.mean(train[p][rows])) for p in PHASES]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.barh([p[:-2] for p in PHASES], means)
    ax.set_xlabel("seconds per step (mean)")
    ax.set_title(f"Phase breakdown (mean step {np.mean(train['step_time_s'][rows]):.3f} s)")
    ax.invert_yaxis()
    save(fig, "phases.png")

    per_rank = f["ranks/step_time_s"][...]
    fig, ax = plt.subplots(figsize=(7, 4))
    for rank in range(per_rank.shape[1]):
        ax.plot(step, per_rank[:, rank], label=f"rank {rank}", linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("step time (s)")
    ax.set_title("Per-rank step time")
    if per_rank.shape[1] <= 16:
        ax.legend(fontsize="small")
    save(fig, "ranks.png")
    config = f.attrs.get("config", b"")
    config = config.decode() if isinstance(config, bytes) else str(config)
    if 'type = "lr_range_test"' in config:
        smoothed, suggested = suggest_lr(train["lr"], train["loss"])
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(train["lr"], train["loss"], ".", alpha=0.4, label="loss")
        ax.plot(train["lr"], smoothed, label="smoothed")
        ax.set_xscale("log")
        ax.set_xlabel("learning rate (log)")
        ax.set_ylabel("loss")
        ax.set_title("LR range test")
        if suggested is not None:
            ax.axvline(suggested, color="tab:red", linestyle="--", label=f"fastest fall: lr {suggested:.3g}")
            print(f"lr range test: the loss fell fastest at lr {suggested:.3g}")
        ax.legend()
        save(fig, "lr_range_test.png")
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
