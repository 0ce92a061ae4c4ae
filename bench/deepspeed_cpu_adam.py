"""Times DeepSpeed's CPU Adam (DeepSpeedCPUAdam, AdamW mode, fp32 state) on one flat fp32
parameter, the way bench_cpu_adamw times ours: best of R steps and the median of R, in
ns/param. Run by deepspeed_cpu_adam.sh inside its own benchmark venv; prints one line
`deepspeed_cpu_adam: ns_per_param=<best> median=<median> version=<v> threads=<t>`.
"""
import argparse
import os
import statistics
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", type=float, default=1e8, help="parameters (default 1e8)")
    parser.add_argument("--threads", type=int, default=2, help="OpenMP/torch threads (default 2)")
    parser.add_argument("--reps", type=int, default=9, help="timed steps (default 9)")
    args = parser.parse_args()
    if os.environ.get("OMP_NUM_THREADS") != str(args.threads):
        sys.exit("deepspeed_cpu_adam.py: set OMP_NUM_THREADS=%d before starting Python "
                 "(DeepSpeed's kernel is OpenMP and reads it once)" % args.threads)

    import torch
    import deepspeed
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    torch.set_num_threads(args.threads)
    n = int(args.params)
    param = torch.nn.Parameter(torch.rand(n))
    param.grad = torch.rand(n) * 1e-3
    optimizer = DeepSpeedCPUAdam([param], lr=1e-4, weight_decay=0.01, adamw_mode=True,
                                 fp32_optimizer_states=True)
    optimizer.step()  # JIT build happens before this returns; the state is allocated here
    times = []
    for _ in range(args.reps):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    print("deepspeed_cpu_adam: ns_per_param=%.3f median=%.3f version=%s threads=%d"
          % (min(times) / n * 1e9, statistics.median(times) / n * 1e9, deepspeed.__version__,
             args.threads), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
