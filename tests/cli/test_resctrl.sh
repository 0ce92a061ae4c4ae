#!/usr/bin/env bash
# [runtime] resctrl on fake resctrl trees (tests/resctrl/fake_resctrl.py: a plain directory with
# the layout of a Grace (MPAM) or Sapphire Rapids (RDT) node, and a stand-in for the kernel that
# adds counters to the groups and logs what each group holds). The kernel's own checks are not
# exercised: this machine has no resctrl. Each case trains the tiny model a few steps:
#   1. Grace, 2 ranks: two groups per rank, the schemata split (3 of 12 ways to the optimizer),
#      the optimizer's threads (so-adamw-N, so-speculation) alone in theirs and every other
#      thread of the rank in the rest's, a stale group of a dead run removed and an
#      administrator's group left alone, the bandwidth series in metrics.h5 (/train and
#      /ranks), `inspect` and the CSV monitor, and no group of the run left afterwards;
#   2. Sapphire Rapids with 4 control groups already taken, 2 ranks: the node's ranks share two;
#   3. groups the Slurm prolog (jobscripts/admin) made for a job: adopted as they are, kept, and
#      removed by the epilog with whatever else the job left;
#   4. no free control group: monitoring groups only (mon_groups);
#   5. ends: SIGTERM (preemption: exit 75) and a rank killed with SIGKILL in a 2-rank job (the
#      survivor removes its groups on its way out; the killed rank's are removed as stale by the
#      next run on the node);
#   (and what `version` and `plan` say of the Grace tree);
#   6. "required" without resctrl, and with a bandwidth share the hardware cannot take: a
#      message, exit 1; "off": nothing is made.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"
fake=tests/resctrl/fake_resctrl.py

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
kernel_pid=
start_kernel() {  # start_kernel LAYOUT NAME: a tree at $tmp/NAME and its kernel in the background
  "$SO_PYTHON" "$fake" make "$1" "$tmp/$2" || fail "fake tree $1"
  "$SO_PYTHON" "$fake" kernel "$tmp/$2" "$tmp/$2.log" &
  kernel_pid=$!
}
stop_kernel() {  # stop_kernel NAME
  touch "$tmp/$1/.stop"
  wait "$kernel_pid"
}
trap 'touch "$tmp"/*/.stop 2> /dev/null; wait; rm -rf "$tmp"' EXIT
train() {  # train NAME RANKS OUTPUT [--set ...]: sets $rc and $log
  local name=$1 ranks=$2 out=$3
  shift 3
  log=$(SUPEROFFLOAD_RESCTRL_MOUNTS="$tmp/$name.mounts" "$MPIEXEC" -np "$ranks" --oversubscribe "$SO_BIN" train \
    configs/tiny.toml --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32 --set training.max_steps=4 \
    --set runtime.device=cpu --set checkpoint.save_on_exit=false --set training.output_dir="$out" \
    --set metrics.csv=true "$@" 2>&1)
  rc=$?
  ((rc < 128)) || fail "ended by signal $((rc - 128)): $log"
}
own_groups() { find "$tmp/$1" "$tmp/$1/mon_groups" -maxdepth 1 -name 'superoffload.*' 2> /dev/null | sort; }

# ---- 1. Grace, 2 ranks, per rank.
start_kernel grace grace
mkdir -p "$tmp/grace/superoffload.4242.999999.optimizer" "$tmp/grace/admin.ioqos"  # a dead run's, an admin's
touch "$tmp/grace/superoffload.4242.999999.optimizer/tasks"
train grace 2 "$tmp/run1"
((rc == 0)) || fail "Grace, 2 ranks: exit $rc: $log"
stop_kernel grace
expect_contains "$log" "resctrl removed 1 stale group(s) of ended runs; partitions per rank (30 control groups free for 2 rank(s)): L3 3 of 12 ways to the optimizer (7), 9 to the rest (ff8) on domain(s) 1; MB uncapped" "the start-up line"
expect_contains "$log" "| Opt mem " "the step line's optimizer bandwidth"
[[ -z $(own_groups grace) ]] || fail "groups left after the run: $(own_groups grace)"
[[ -d $tmp/grace/admin.ioqos ]] || fail "the administrator's group was removed"
"$SO_PYTHON" - "$tmp/grace.log" "$tmp/run1" <<'PY' || fail "Grace: groups, schemata, tasks or metrics"
import csv, glob, sys
import h5py, numpy as np
sys.path.insert(0, "tests/resctrl")
from fake_resctrl import last_seen
last = last_seen(sys.argv[1])
groups = sorted(g for g in last if g.startswith("superoffload.nojob."))
assert len(groups) == 4, groups  # two per rank
pids = sorted({g.split(".")[2] for g in groups})
assert len(pids) == 2, groups
for pid in pids:
    optimizer, rest = last[f"superoffload.nojob.{pid}.optimizer"], last[f"superoffload.nojob.{pid}.rest"]
    assert optimizer["schemata"] == "L3:1=7\n", optimizer["schemata"]  # bandwidth uncapped: no MB line
    assert rest["schemata"] == "L3:1=ff8\n", rest["schemata"]
    names = {tid: info[0] for tid, info in optimizer["tasks"].items() if info}
    assert names and all(n.startswith(("so-adamw-", "so-speculation")) for n in names.values()), optimizer["tasks"]
    assert "so-speculation" in names.values(), names
    assert all(info[1] == int(pid) for info in optimizer["tasks"].values() if info), optimizer["tasks"]
    rest_names = {info[0] for info in rest["tasks"].values() if info}
    assert pid in rest["tasks"] and rest["tasks"][pid][0] == "superoffload", rest["tasks"]  # the main thread
    assert not any(n.startswith(("so-adamw-", "so-speculation")) for n in rest_names), rest_names
    assert all(info[1] == int(pid) for info in rest["tasks"].values() if info), rest["tasks"]
assert "superoffload.4242.999999.optimizer" in last  # it was there at the start
f = h5py.File(sys.argv[2] + "/metrics.h5", "r")
optimizer, rest = f["train/optimizer_mem_gb_per_s"][...], f["train/rest_mem_gb_per_s"][...]
assert len(optimizer) == 4 and np.isfinite(optimizer[1:]).all() and (optimizer[1:] > 0).all(), optimizer
assert np.isfinite(rest[1:]).all() and (rest[1:] > 0).all(), rest
per_rank = f["ranks/optimizer_mem_gb_per_s"][...]
assert per_rank.shape == (4, 2) and np.isfinite(per_rank[1:]).all(), per_rank
assert np.allclose(per_rank[1:].sum(axis=1), optimizer[1:]), (per_rank, optimizer)
assert (f["train/optimizer_cache_bytes"][1:] > 0).all()
rows = list(csv.reader(open(glob.glob(sys.argv[2] + "/*/Train_Samples_optimizer_mem_gb_per_s.csv")[0])))
assert len(rows) >= 3, rows
print(f"Grace: 4 groups, optimizer {optimizer[1:].round(2)} GB/s, rest {rest[1:].round(2)} GB/s")
PY
inspected=$("$SO_BIN" inspect "$tmp/run1/metrics.h5" 2>&1) || fail "inspect: $inspected"
expect_contains "$inspected" "resctrl     memory bandwidth (mean GB/s): optimizer" "inspect"

# What `version` and `plan` say of the same tree.
out=$(SUPEROFFLOAD_RESCTRL_MOUNTS="$tmp/grace.mounts" "$SO_BIN" version 2>&1) || fail "version: $out"
expect_contains "$out" "resctrl at $tmp/grace (writable): L3 12-bit masks" "version: the tree"
expect_contains "$out" "a training run of 1 rank(s) here partitions per rank" "version: the decision"
out=$(SUPEROFFLOAD_RESCTRL_MOUNTS="$tmp/grace.mounts" "$SO_BIN" plan configs/reference-models/llama-3.1-8b.toml \
  --gpus-per-node 20 --set runtime.resctrl_optimizer_cache=0.5 2>&1)
expect_contains "$out" "with 20 rank(s) per node like this one, the run partitions per node (only 30 control groups free for 20 ranks: the node's ranks share two): L3 6 of 12 ways" "plan"

# ---- 2. Sapphire Rapids, 4 of its 7 free control groups taken: the 2 ranks share two.
start_kernel sapphire-rapids spr
mkdir -p "$tmp/spr/other."{1,2,3,4}
train spr 2 "$tmp/run2"
((rc == 0)) || fail "Sapphire Rapids, per node: exit $rc: $log"
stop_kernel spr
expect_contains "$log" "partitions per node (only 3 control groups free for 2 ranks: the node's ranks share two): L3 4 of 15 ways to the optimizer (f), 11 to the rest (7ff0) on domain(s) 0" "the per-node line"
"$SO_PYTHON" - "$tmp/spr.log" <<'PY' || fail "Sapphire Rapids: the node's groups"
import sys
sys.path.insert(0, "tests/resctrl")
from fake_resctrl import last_seen
last = last_seen(sys.argv[1])
groups = sorted(g for g in last if g.startswith("superoffload."))
assert len(groups) == 2, groups
optimizer = last[[g for g in groups if g.endswith(".optimizer")][0]]
assert optimizer["schemata"] == "L3:0=f\n", optimizer["schemata"]
assert len({info[1] for info in optimizer["tasks"].values() if info}) == 2, optimizer["tasks"]  # both ranks' threads
PY
[[ -z $(own_groups spr) ]] || fail "groups left after the per-node run: $(own_groups spr)"

# ---- 3. Groups the Slurm prolog (jobscripts/admin/resctrl-prolog.sh) made for job 777: adopted
# as they are, kept by the run, removed by the epilog with the group a killed rank left.
start_kernel grace prepared
SLURM_JOB_ID=777 SLURM_JOB_USER=nobody SUPEROFFLOAD_RESCTRL_MOUNTS="$tmp/prepared.mounts" \
  SUPEROFFLOAD_RESCTRL_OPTIMIZER_CACHE=0.2 SUPEROFFLOAD_RESCTRL_OPTIMIZER_BANDWIDTH=0.6 \
  bash jobscripts/admin/resctrl-prolog.sh || fail "the prolog failed"
[[ $(cat "$tmp/prepared/superoffload.777.optimizer/schemata") == $'L3:1=3\nMB:1=60' ]] ||
  fail "prolog: optimizer schemata $(cat "$tmp/prepared/superoffload.777.optimizer/schemata")"
[[ $(cat "$tmp/prepared/superoffload.777.rest/schemata") == $'L3:1=ffc' ]] ||
  fail "prolog: rest schemata $(cat "$tmp/prepared/superoffload.777.rest/schemata")"
[[ $(stat -c %U "$tmp/prepared/superoffload.777.optimizer/tasks") == nobody ]] || fail "prolog: tasks not handed to the user"
log=$(SLURM_JOB_ID=777 SUPEROFFLOAD_RESCTRL_MOUNTS="$tmp/prepared.mounts" "$SO_BIN" train configs/tiny.toml \
  --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32 --set training.max_steps=2 --set runtime.device=cpu \
  --set checkpoint.save_on_exit=false --set training.output_dir="$tmp/run3" 2>&1) || fail "prepared groups: $log"
expect_contains "$log" "partitions with the groups superoffload.777.optimizer and superoffload.777.rest that the job's prolog prepared" "adopting"
[[ $(cat "$tmp/prepared/superoffload.777.optimizer/schemata") == $'L3:1=3\nMB:1=60' ]] || fail "prepared schemata changed"
[[ -s $tmp/prepared/superoffload.777.optimizer/tasks && -s $tmp/prepared/superoffload.777.rest/tasks ]] ||
  fail "no thread moved into the prepared groups"
[[ $(own_groups prepared | wc -l) == 2 ]] || fail "prepared groups removed or others made: $(own_groups prepared)"
mkdir "$tmp/prepared/superoffload.777.12345.optimizer" "$tmp/prepared/superoffload.778.rest"  # a killed rank's; another job's
# The fake kernel stops first: on resctrl a group's rmdir is atomic, but in this plain tree the
# epilog's rm -r would race the fake kernel re-creating counter folders ("Directory not empty").
stop_kernel prepared
SLURM_JOB_ID=777 SUPEROFFLOAD_RESCTRL_MOUNTS="$tmp/prepared.mounts" bash jobscripts/admin/resctrl-epilog.sh ||
  fail "the epilog failed"
[[ $(own_groups prepared) == "$tmp/prepared/superoffload.778.rest" ]] || fail "epilog left: $(own_groups prepared)"

# ---- 4. No control group free (num_closids 1): monitoring groups only.
start_kernel grace monitor
echo 1 > "$tmp/monitor/info/L3/num_closids"
train monitor 1 "$tmp/run4"
((rc == 0)) || fail "monitor only: exit $rc: $log"
stop_kernel monitor
expect_contains "$log" "monitors the optimizer's and the rest's bandwidth only (only 0 control group(s) free, two are needed); counters recorded per step" "monitor-only line"
grep -q '"group": "mon_groups/superoffload.nojob.' "$tmp/monitor.log" || fail "no monitoring group was made"
"$SO_PYTHON" -c "
import h5py, numpy as np, sys
v = h5py.File(sys.argv[1], 'r')['train/optimizer_mem_gb_per_s'][1:]
assert np.isfinite(v).all() and (v > 0).all(), v" "$tmp/run4/metrics.h5" || fail "monitor only: no bandwidth series"
[[ -z $(own_groups monitor) ]] || fail "monitoring groups left: $(own_groups monitor)"

# ---- 5. SIGTERM (preemption) and a rank killed with SIGKILL.
wait_for_groups() {  # wait_for_groups NAME COUNT
  for _ in $(seq 600); do
    (($(own_groups "$1" | wc -l) >= $2)) && return 0
    sleep 0.1
  done
  fail "no groups appeared under $tmp/$1"
}
start_kernel grace ends
SUPEROFFLOAD_RESCTRL_MOUNTS="$tmp/ends.mounts" "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" \
  --set data.seq_len=32 --set training.max_steps=100000 --set runtime.device=cpu --set checkpoint.save_on_exit=true \
  --set training.output_dir="$tmp/run5" > "$tmp/run5.log" 2>&1 &
pid=$!
wait_for_groups ends 2
kill -TERM "$pid"
wait "$pid"
rc=$?
((rc == 75)) || fail "SIGTERM: exit $rc, expected 75 (preempted): $(tail -5 "$tmp/run5.log")"
[[ -z $(own_groups ends) ]] || fail "groups left after SIGTERM: $(own_groups ends)"

"$MPIEXEC" -np 2 --oversubscribe -x SUPEROFFLOAD_RESCTRL_MOUNTS="$tmp/ends.mounts" "$SO_BIN" train configs/tiny.toml \
  --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32 --set training.max_steps=100000 --set runtime.device=cpu \
  --set checkpoint.save_on_exit=false --set runtime.collective_timeout_s=10 --set training.output_dir="$tmp/run6" \
  > "$tmp/run6.log" 2>&1 &
launcher=$!
wait_for_groups ends 4
victim=$(own_groups ends | head -1 | sed 's/.*superoffload\.nojob\.\([0-9]*\)\..*/\1/')
kill -KILL "$victim"
wait "$launcher"
left=$(own_groups ends)
[[ $(wc -l <<< "$left") == 2 && $left == *".$victim."* ]] ||
  fail "after rank $victim was killed, only its two groups should be left: $left"
train ends 1 "$tmp/run7" --set training.max_steps=1
((rc == 0)) || fail "the run after the kill: exit $rc: $log"
stop_kernel ends
expect_contains "$log" "resctrl removed 2 stale group(s) of ended runs" "stale groups of the killed rank"
[[ -z $(own_groups ends) ]] || fail "groups left: $(own_groups ends)"

# ---- 6. required, and off.
log=$("$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32 \
  --set training.max_steps=1 --set runtime.device=cpu --set training.output_dir="$tmp/run8" \
  --set runtime.resctrl='"required"' 2>&1)
rc=$?
((rc == 1)) || fail "required without resctrl: exit $rc: $log"
expect_contains "$log" "[runtime] resctrl = \"required\", but rank 0 on" "required without resctrl"
expect_contains "$log" "resctrl is not mounted on this node" "required without resctrl: why"
"$SO_PYTHON" "$fake" make sapphire-rapids "$tmp/off" || fail "fake tree"
train off 1 "$tmp/run9" --set runtime.resctrl='"required"' --set runtime.resctrl_optimizer_bandwidth=0.04
((rc == 1)) || fail "required with a bandwidth share below the minimum: exit $rc: $log"
expect_contains "$log" "cannot partition: " "required, share too small"
train off 1 "$tmp/run10" --set runtime.resctrl='"off"' --set training.max_steps=1
((rc == 0)) || fail "off: exit $rc: $log"
expect_contains "$log" "resctrl does nothing: [runtime] resctrl = \"off\"" "off"
[[ -z $(own_groups off) ]] || fail "groups made with resctrl = off"
echo "resctrl: per rank, per node, prepared, monitor only, SIGTERM, SIGKILL + stale, required and off as expected"
