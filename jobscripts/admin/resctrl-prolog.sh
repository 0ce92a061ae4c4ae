#!/bin/bash
# Slurm Prolog for superoffload's cache and memory-bandwidth partitioning (resctrl: Intel RDT,
# AMD PQoS, Arm MPAM). Runs as root on each node of a job before the job starts, where the job's
# user may not make resctrl groups; makes the job's two groups and hands their task lists to
# the job's user:
#   <resctrl>/superoffload.<job id>.optimizer   the CPU optimizer's threads
#   <resctrl>/superoffload.<job id>.rest        every other thread of the job's ranks
# superoffload finds them by name (SLURM_JOB_ID) and moves its threads in; it never changes
# their schemata. resctrl-epilog.sh removes them. Every rank of the node shares the two groups.
#
#   slurm.conf:  Prolog=/opt/superoffload/jobscripts/admin/resctrl-prolog.sh
#                Epilog=/opt/superoffload/jobscripts/admin/resctrl-epilog.sh
#
# The split, in the environment of slurmd (or edited here): SUPEROFFLOAD_RESCTRL_OPTIMIZER_CACHE,
# the share of each last-level cache's ways for the optimizer (default 0.25: low ways; the rest
# gets the others) and SUPEROFFLOAD_RESCTRL_OPTIMIZER_BANDWIDTH, its memory-bandwidth cap as a
# share (default 1.0: none). Jobs can be left out with SUPEROFFLOAD_RESCTRL_PARTITIONS (a
# comma-separated list of partitions to prepare groups on; empty: all).
#
# It never fails a job: a Prolog that exits non-zero drains the node. Whatever goes wrong is
# logged (logger -t superoffload-resctrl) and the job runs unpartitioned.
set -u
tag=superoffload-resctrl
say() { logger -t "$tag" -- "job ${SLURM_JOB_ID:-?}: $*" 2> /dev/null || echo "$tag: $*" >&2; }

job=${SLURM_JOB_ID:-}
user=${SLURM_JOB_USER:-}
[[ -n $job && -n $user ]] || { say "no SLURM_JOB_ID or SLURM_JOB_USER: not run by slurmd's Prolog"; exit 0; }
if [[ -n ${SUPEROFFLOAD_RESCTRL_PARTITIONS:-} && ",$SUPEROFFLOAD_RESCTRL_PARTITIONS," != *",${SLURM_JOB_PARTITION:-},"* ]]; then
  exit 0
fi
# The mount point; SUPEROFFLOAD_RESCTRL_MOUNTS names another mount table (tests).
root=$(awk '$3 == "resctrl" { print $2; exit }' "${SUPEROFFLOAD_RESCTRL_MOUNTS:-/proc/self/mounts}" 2> /dev/null)
[[ -n $root && -d $root/info ]] || exit 0  # no resctrl on this node: nothing to do

cache_share=${SUPEROFFLOAD_RESCTRL_OPTIMIZER_CACHE:-0.25}
bandwidth_share=${SUPEROFFLOAD_RESCTRL_OPTIMIZER_BANDWIDTH:-1.0}
optimizer=$root/superoffload.$job.optimizer
rest=$root/superoffload.$job.rest

# "L3:0=7fff;1=7fff" -> "0 1": the domains of a resource in the root group's schemata.
domains() { awk -v r="$1" -F'[:;=]' '{ sub(/^ +/, "") } $1 == r { for (i = 2; i < NF; i += 2) printf "%s ", $i }' "$root/schemata"; }
# "L3" "0 1" "f" -> "L3:0=f;1=f"
line() {
  local name=$1 value=$3 out= d
  for d in $2; do out+="${out:+;}$d=$value"; done
  echo "$name:$out"
}

optimizer_schemata= rest_schemata=
for info in "$root"/info/*/; do
  name=$(basename "$info")
  ids=$(domains "$name")
  [[ -n $ids ]] || continue
  if [[ -r $info/cbm_mask ]]; then
    full=$((16#$(< "$info/cbm_mask")))
    least=$(< "$info/min_cbm_bits")
    ((least < 1)) && least=1
    bits=0
    while (((full >> bits) & 1)); do bits=$((bits + 1)); done
    ((bits >= 2 * least)) || { say "$name has $bits ways: too few to split"; exit 0; }
    ways=$(awk -v s="$cache_share" -v b="$bits" 'BEGIN { printf "%d", s * b + 0.5 }')
    ((ways < least)) && ways=$least
    ((ways > bits - least)) && ways=$((bits - least))
    low=$(((1 << ways) - 1))
    optimizer_schemata+="$(line "$name" "$ids" "$(printf %x "$low")")"$'\n'
    rest_schemata+="$(line "$name" "$ids" "$(printf %x $((full & ~low)))")"$'\n'
  elif [[ -r $info/bandwidth_gran ]]; then
    granularity=$(< "$info/bandwidth_gran")
    minimum=$(< "$info/min_bandwidth")
    # The top of the scale is the root group's value (100 percent, or AMD's 2048 units).
    top=$(awk -v r="$name" -F'[:;=]' '{ sub(/^ +/, "") } $1 == r { print $3; exit }' "$root/schemata")
    # Mounted with mba_MBps the root group reads "unlimited" (2^32 - 1 MB/s): no share to take.
    ((top > 1000000)) && { say "$name is in MB/s (mba_MBps): its cap is left alone"; continue; }
    cap=$(awk -v s="$bandwidth_share" -v t="$top" -v g="$granularity" 'BEGIN { printf "%d", int(s * t / g + 0.5) * g }')
    ((cap > top)) && cap=$top
    ((cap < minimum)) && { say "a bandwidth share of $bandwidth_share is below $name's minimum $minimum"; exit 0; }
    # Only a cap is written: a new group starts with the whole bandwidth, and the rest keeps it.
    ((cap < top)) && optimizer_schemata+="$(line "$name" "$ids" "$cap")"$'\n'
  fi
done
[[ -n $optimizer_schemata ]] || { say "no cache or bandwidth resource to partition"; exit 0; }

# A requeued job's groups may still be there: made afresh.
rmdir "$optimizer" "$rest" 2> /dev/null
write() {  # write FILE TEXT: in one write, which the kernel parses line by line
  printf '%s' "$2" > "$1" || { say "$1 refused '${2%%$'\n'*}': $(head -1 "$root/info/last_cmd_status" 2> /dev/null)"; return 1; }
}
# (The kernel gives a new group its tasks file; the touch only matters on a test's plain directory.)
if mkdir "$optimizer" "$rest" && touch "$optimizer/tasks" "$rest/tasks" &&
  write "$optimizer/schemata" "$optimizer_schemata" &&
  { [[ -z $rest_schemata ]] || write "$rest/schemata" "$rest_schemata"; } &&
  chown "$user" "$optimizer" "$rest" "$optimizer/tasks" "$rest/tasks"; then
  say "made $optimizer and $rest for $user"
else
  say "could not prepare the groups: the job runs unpartitioned"
  rmdir "$optimizer" "$rest" 2> /dev/null || [[ -z ${SUPEROFFLOAD_RESCTRL_MOUNTS:-} ]] || rm -rf "$optimizer" "$rest"
fi
exit 0
