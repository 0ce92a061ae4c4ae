#!/usr/bin/env bash
# Shared body of the reference-model jobscripts: runs configs/reference-models/<model>.toml (or $CONFIG)
# under srun in the mode of DeepSpeed's SuperOffload examples.
#   MODE=superoffload (default): CPU AdamW speculated during backward, `ratio` of it on the CPU
#   MODE=zerooffload: the ZeRO-Offload baseline, whole optimizer on the CPU after backward
# Extra arguments go to `superoffload train` (e.g. --set model.path=/scratch/models/...).
# Preemption (jobscripts/lib/preemptible.sh): a warning signal ends in a checkpoint and a
# requeue; the requeued job resumes from its latest checkpoint.
set -euo pipefail
model=$1
shift
mode=${MODE:-superoffload}
cd "${SLURM_SUBMIT_DIR:?run this through sbatch (jobscripts/$model.sbatch)}"
# CONFIG: another config than the reference model's (the long-context jobscript's).
config=${CONFIG:-configs/reference-models/$model.toml}
[[ -f $config ]] || { echo "error: no $config" >&2; exit 2; }
case $mode in
  superoffload) mode_args=() ;;
  zerooffload) mode_args=(--set offload.super_offload=false --set offload.ratio=1.0) ;;
  *) echo "error: MODE=$mode; use superoffload or zerooffload" >&2; exit 2 ;;
esac

# Site environment for GH200 nodes (adapt): one OpenMP thread per rank (superoffload sizes
# its own CPU optimizer pool from the bound cores), HDF5 without POSIX file locks (Lustre and
# GPFS often refuse them), NCCL warnings in the job log, expandable allocator segments.
export OMP_NUM_THREADS=1
export HDF5_USE_FILE_LOCKING=FALSE
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# LibTorch's allocator grows segments instead of caching fixed blocks: on an H200 the 8B's
# reserved device peak fell from 62.2 to 54.3 GiB (allocated 47.3 both; bench/RESULTS.md).
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}

# The job id stays the same across requeues, so a requeued job finds its own checkpoints.
output=runs/$model-$mode-${SLURM_JOB_ID:-local}
echo "superoffload: $model ($mode) on ${SLURM_NNODES:-1} node(s), ${SLURM_NTASKS:-1} rank(s); output $output"
# --cpu-bind=cores: each rank keeps the cores Slurm gave it (its GH200's Grace cores);
# superoffload keeps a launcher's binding and runs the CPU AdamW on cpuadam_cores_perc of them.
# shellcheck source=jobscripts/lib/preemptible.sh
source jobscripts/lib/preemptible.sh
run_preemptible srun --mpi=pmix --cpu-bind=cores build/bin/superoffload train "$config" \
  --set training.output_dir="$output" "${mode_args[@]}" "$@"
