# Sourced by the jobscripts: run_preemptible runs a job step (srun …) so that a preemption
# warning ends in a checkpoint and a requeue instead of lost work.
#
#   #SBATCH --signal=B:USR1@120   Slurm signals the batch shell 120 s before the time limit
#   #SBATCH --requeue             the job may go back to the queue
#   run_preemptible srun --mpi=pmix build/bin/superoffload train cfg.toml
#
# SIGUSR1 or SIGTERM reaching this shell (from --signal, `scancel --signal=USR1 --batch`, or
# `scancel` itself) is forwarded to the step; srun passes it to every rank; the ranks agree at
# the next step boundary, write a checkpoint and exit with 75. On 75 the job is requeued and,
# when it runs again, resumes from checkpoints/latest ([checkpoint] auto_resume).
run_preemptible() {
  "$@" &
  local step=$! rc
  trap 'echo "superoffload: SIGUSR1: asking the job step to checkpoint and stop"; kill -USR1 "$step" 2>/dev/null' USR1
  trap 'echo "superoffload: SIGTERM: asking the job step to checkpoint and stop"; kill -TERM "$step" 2>/dev/null' TERM
  while :; do
    wait "$step" && rc=0 || rc=$?
    # A trapped signal interrupts `wait` (status > 128) while the step still runs: wait again.
    kill -0 "$step" 2>/dev/null || break
  done
  trap - USR1 TERM
  if [[ $rc -eq 75 ]]; then
    echo "superoffload: stopped after a checkpoint; requeueing job ${SLURM_JOB_ID:-?}"
    [[ -n ${SLURM_JOB_ID:-} ]] && scontrol requeue "$SLURM_JOB_ID"
  fi
  return "$rc"
}
