#!/bin/bash
# Slurm Epilog pairing resctrl-prolog.sh: runs as root on each node after a job, however it
# ended, and removes every resctrl group of the job: the two the prolog made and any that
# superoffload made itself (superoffload.<job id>.<pid>.*, at the root and under mon_groups),
# which a rank killed with SIGKILL cannot remove. Their threads, if any are left, return to the
# default group. Never fails (a failing Epilog drains the node); problems go to logger.
set -u
job=${SLURM_JOB_ID:-}
[[ -n $job ]] || exit 0
root=$(awk '$3 == "resctrl" { print $2; exit }' "${SUPEROFFLOAD_RESCTRL_MOUNTS:-/proc/self/mounts}" 2> /dev/null)
[[ -n $root && -d $root/info ]] || exit 0
for group in "$root"/superoffload."$job".* "$root"/mon_groups/superoffload."$job".*; do
  [[ -d $group ]] || continue
  # On resctrl, rmdir removes a group with its files; a test's plain directory needs rm -r.
  rmdir "$group" 2> /dev/null || { [[ -n ${SUPEROFFLOAD_RESCTRL_MOUNTS:-} ]] && rm -rf "$group"; } ||
    logger -t superoffload-resctrl -- "job $job: could not remove $group" 2> /dev/null
done
exit 0
