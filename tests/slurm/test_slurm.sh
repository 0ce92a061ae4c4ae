#!/usr/bin/env bash
# The tiny jobscript under a real Slurm (munge + slurmctld + slurmd on loopback, launched with
# `srun --mpi=pmix`): one job runs to completion; a second gets the preemption signal mid-run
# (`scancel --signal=USR1 --batch`), checkpoints, exits 75, is requeued by its batch script,
# resumes from its latest checkpoint and ends with losses bit-identical to the first job's.
source "$(dirname "$0")/../cli/lib.sh"
source "$(dirname "$0")/local_slurm.sh"
for tool in munged slurmctld slurmd sbatch scontrol scancel; do
  command -v "$tool" > /dev/null || { echo "SKIPPED: $tool is not installed (scripts/setup installs Slurm from Debian)"; exit 0; }
done
trap 'slurm_stop; rm -rf "$tmp"' EXIT
slurm_start "$tmp/slurm" || fail "could not start Slurm"

work=$tmp/work
mkdir -p "$work/runs/tiny/data"
cd "$work"
"$SO_DEMO_CORPUS" runs/tiny/data/corpus.jsonl --tokens 60000 > /dev/null || fail "demo corpus"
args=(--set data.seq_len=32 --set training.train_micro_batch_size_per_gpu=2 --set training.max_steps=40
      --set checkpoint.every_steps=10 --set metrics.flush_every_steps=1)
submit() { SUPEROFFLOAD_HOME=$SO_SOURCE_DIR sbatch --parsable "$SO_SOURCE_DIR/jobscripts/tiny-cpu.sbatch" "${args[@]}"; }
output() { cat "slurm-superoffload-tiny-$1.out" 2>/dev/null; }

first=$(submit) || fail "sbatch refused the jobscript"
slurm_wait_job "$first" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY" 240 || fail "$(output "$first")"
[[ $(slurm_job_state "$first") == COMPLETED ]] || fail "job $first ended $(slurm_job_state "$first"): $(output "$first")"
expect_contains "$(output "$first")" "Step 40/40 | Loss" "the sbatch run trained"
# srun --cpu-bind=cores with --cpus-per-task: the binding the user asked for is kept, and one
# core per rank is the whole share the optimizer asks for (no warning).
expect_contains "$(output "$first")" "launcher (asked)" "srun's binding is kept"
[[ $(output "$first") != *"is bound to"*"fewer than cpuadam_cores_perc"* ]] || fail "unexpected starved-optimizer warning"
[[ -f runs/tiny-$first/checkpoints/step_00000040/DONE ]] || fail "no final checkpoint"

second=$(submit) || fail "second sbatch"
for _ in $(seq 600); do
  grep -q "Step 6/40" "slurm-superoffload-tiny-$second.out" 2>/dev/null && break
  sleep 0.1
done
expect_contains "$(output "$second")" "Step 6/40" "second job running"
scancel --signal=USR1 --batch "$second" || fail "scancel --signal"
for _ in $(seq 600); do
  grep -q "requeueing job" "slurm-superoffload-tiny-$second.out" 2>/dev/null && break
  sleep 0.1
done
expect_contains "$(output "$second")" "saving a checkpoint at step" "checkpoint on the preemption signal"
expect_contains "$(output "$second")" "requeueing job $second" "requeue by the batch script"
slurm_wait_job "$second" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 300 || fail "$(output "$second")"
[[ $(slurm_job_state "$second") == COMPLETED ]] || fail "requeued job ended $(slurm_job_state "$second"): $(output "$second")"
expect_contains "$(output "$second")" "resumed from runs/tiny-$second/checkpoints/step_" "the requeued job resumed"
"$SO_PYTHON" - "runs/tiny-$first/metrics.h5" "runs/tiny-$second/metrics.h5" <<'PY' || fail "losses differ"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["train/loss"][...] for p in sys.argv[1:3])
assert a.shape == b.shape == (40,), (a.shape, b.shape)
assert np.array_equal(a, b), f"{a}\n{b}"
print("final loss", b[-1], "after preemption and requeue equals the uninterrupted job's")
PY
echo "slurm: sbatch run completed; preempted job checkpointed, requeued, resumed, same final loss"
