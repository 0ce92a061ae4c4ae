#!/usr/bin/env bash
# DeepSpeed's CPU Adam against superoffload's kernel, same machine, same run, same sizes and
# thread count. Not a test, and nothing here is installed by scripts/setup: on first use it
# makes a benchmark venv (build/deepspeed-venv) with PyPI's `deepspeed`, reusing the LibTorch of
# the project's .venv (a .pth file), and DeepSpeed JIT-builds its CPU Adam op (about a minute).
#
#   bench/deepspeed_cpu_adam.sh [--params 1e8] [--threads 2]
# Prints both tools' output, then (median step times on both sides)
#   ratio: params=… threads=… deepspeed_fp32=… superoffload_fp32=… speedup_fp32=… speedup_bf16_moments=…
# speedup_fp32 compares like with like (fp32 moments, no bf16 copy: 28 bytes per parameter on
# both sides); speedup_bf16_moments is our bf16-moment kernel (with the bf16 copy) against
# DeepSpeed's fp32 step, the saving that option buys.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
params=1e8
threads=$(nproc)
while (($#)); do
  case $1 in
    --params) params=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "deepspeed_cpu_adam.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bench="$root/build/bin/bench_cpu_adamw"
[[ -x $bench ]] || { echo "deepspeed_cpu_adam.sh: $bench is missing: run scripts/setup first" >&2; exit 2; }
[[ -x $root/.venv/bin/python ]] || { echo "deepspeed_cpu_adam.sh: $root/.venv is missing: run scripts/setup first" >&2; exit 2; }

venv="$root/build/deepspeed-venv"
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c "import deepspeed" > /dev/null 2>&1; then
  echo "== making $venv (deepspeed from PyPI, LibTorch from .venv)"
  python3 -m venv "$venv"
  torch_site=$("$root/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$torch_site" > "$site/superoffload-torch.pth"
  "$venv/bin/pip" install --quiet deepspeed
fi

echo "== DeepSpeedCPUAdam (first run JIT-builds the op)"
ds=$(OMP_NUM_THREADS=$threads "$venv/bin/python" "$root/bench/deepspeed_cpu_adam.py" --params "$params" \
       --threads "$threads" 2>&1 | grep -E "^deepspeed_cpu_adam:|Error|error" || true)
echo "$ds"
# Medians on both sides (bench_cpu_adamw's summary lines are medians too).
ds_ns=$(sed -nE 's/^deepspeed_cpu_adam: .*median=([0-9.]+).*/\1/p' <<<"$ds")
[[ -n $ds_ns ]] || { echo "deepspeed_cpu_adam.sh: DeepSpeed's CPU Adam did not run (output above)" >&2; exit 1; }

echo "== bench_cpu_adamw"
ours=$("$bench" --params "$params" --threads "$threads")
echo "$ours"
fp32_ns=$(sed -nE 's/^summary: kernel=fp32 .*ns_per_param=([0-9.]+).*/\1/p' <<<"$ours")
moments_ns=$(sed -nE 's/^summary: kernel=bf16_moments\+bf16_copy .*ns_per_param=([0-9.]+).*/\1/p' <<<"$ours")
awk -v p="$params" -v t="$threads" -v d="$ds_ns" -v f="$fp32_ns" -v m="$moments_ns" 'BEGIN {
  printf "ratio: params=%s threads=%s deepspeed_fp32=%.3f superoffload_fp32=%.3f speedup_fp32=%.2f speedup_bf16_moments=%.2f\n",
         p, t, d, f, d / f, d / m }'
