#!/usr/bin/env bash
# `mpirun superoffload version`: the binding table under Open MPI's default binding, an asked
# one and none (#32). Open MPI binds 1-2 ranks to one core each by default; superoffload
# replaces that with its own share ("launcher (default, widened)"), keeps a binding asked with
# --bind-to ("launcher (asked)", with a warning when it starves the CPU optimizer) and binds
# unbound ranks itself ("superoffload"). Ranks never share cores.
source "$(dirname "$0")/lib.sh"
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # the CPUs this process may use

# table_rows OUTPUT: the table's rank rows.
table_rows() { awk '$1 ~ /^[0-9]+$/ && NF >= 9' <<<"$1"; }

for binding in "" "--bind-to none" "--bind-to core"; do
  # shellcheck disable=SC2086
  out=$("$MPIEXEC" -np 2 $binding "$SO_BIN" version 2>&1) || fail "version under mpirun $binding: $out"
  expect_contains "$out" "LibTorch" "versions"
  expect_contains "$out" "2 rank(s) on 1 node(s)" "world"
  # resctrl, once per node (this machine has none mounted; tests/unit/test_resctrl.cpp reads trees).
  [[ $(grep -c "^node 0 (.*): resctrl" <<<"$out") == 1 ]] || fail "expected one resctrl line for node 0: $out"
  if ! grep -qw resctrl /proc/self/mounts; then expect_contains "$out" "resctrl: not mounted" "no resctrl here"; fi
  rows=$(table_rows "$out")
  [[ $(wc -l <<<"$rows") == 2 ]] || fail "expected 2 table rows ($binding):
$out"
  cpus0=$(awk '$1 == 0 {print $5}' <<<"$rows")
  cpus1=$(awk '$1 == 1 {print $5}' <<<"$rows")
  [[ -n $cpus0 && -n $cpus1 && $cpus0 != "$cpus1" ]] || fail "ranks share cpus ($binding): $cpus0 / $cpus1
$out"
  [[ $out != *"share CPUs"* ]] || fail "unexpected sharing warning ($binding): $out"
  case $binding in
    "") expect_contains "$rows" "launcher (default, widened)" "Open MPI's default binding is replaced" ;;
    "--bind-to none") expect_contains "$rows" "superoffload" "unbound ranks are bound by superoffload" ;;
    "--bind-to core") expect_contains "$rows" "launcher (asked)" "an asked binding is kept" ;;
  esac
done

# One rank: Open MPI's default gives it one core; superoffload gives it the whole NUMA share.
out=$("$MPIEXEC" -np 1 "$SO_BIN" version 2>&1) || fail "version, 1 rank: $out"
row=$(table_rows "$out")
expect_contains "$row" "launcher (default, widened)" "1 rank, default binding"
threads=$(awk '{print $8}' <<<"$row")
((threads == cores)) || fail "1 rank under Open MPI's default binding runs $threads thread(s) on a $cores-core node: $out"
[[ $out != *"warning: rank 0"* ]] || fail "a widened binding is not warned about: $out"

# One rank bound to one core on request: kept, and the optimizer's loss of cores is said once,
# with the cores, the NUMA node's count and the flag that fixes it.
if ((cores >= 2)); then
  out=$("$MPIEXEC" -np 1 --bind-to core "$SO_BIN" version 2>&1) || fail "version, --bind-to core: $out"
  row=$(table_rows "$out")
  expect_contains "$row" "launcher (asked)" "1 rank, --bind-to core"
  [[ $(awk '{print $8}' <<<"$row") == 1 ]] || fail "--bind-to core: expected 1 thread: $out"
  for part in "rank 0 on" "is bound to 1 core(s) (cpus" "by mpirun --bind-to core" "of the $cores cores of NUMA node(s)" \
              "cpuadam_cores_perc = 0.8" "mpirun --bind-to none"; do
    expect_contains "$out" "$part" "the starved-optimizer warning"
  done
  [[ $(grep -c "is bound to" <<<"$out") == 1 ]] || fail "the warning is printed once: $out"
  # The same asked through an MCA parameter (exported, as --mca does) is still asked.
  out=$(OMPI_MCA_hwloc_base_binding_policy=core "$MPIEXEC" -np 1 "$SO_BIN" version 2>&1) || fail "MCA binding: $out"
  expect_contains "$(table_rows "$out")" "launcher (asked)" "an MCA binding policy is asked"
fi

# Memory follows the cores superoffload bound the rank to: the main thread's policy (inherited
# by the threads started after it) names the rank's NUMA node, as /proc/PID/numa_maps shows it
# ("prefer (many):0" where the kernel has MPOL_PREFERRED_MANY, else "bind:0"). With bind =
# "none" the kernel's default (first touch) stays.
"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
numa_policy() {  # numa_policy [--set ...]: the policy of a training process's heap mapping
  "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32 \
    --set training.max_steps=100000 --set training.output_dir="$tmp/memory" "$@" > "$tmp/memory.log" 2>&1 &
  local pid=$! policy=""
  for _ in $(seq 600); do
    grep -q "Step 2/" "$tmp/memory.log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break  # ended early: the check below says so, with its log
    sleep 0.1
  done
  policy=$(grep -m1 ' heap' "/proc/$pid/numa_maps" 2>/dev/null | sed 's/^[0-9a-f]* //; s/ heap.*//; s/ //g')
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -rf "$tmp/memory"
  echo "$policy"
}
cd "$SO_SOURCE_DIR"
node=$("$SO_BIN" version 2>&1 | awk '$1 == 0 && NF >= 9 {print $6}')
policy=$(numa_policy)
[[ $policy == "bind:$node" || $policy == "prefer(many):$node" || $policy == "prefer:$node" ]] \
  || fail "memory not bound to NUMA node $node: heap policy '$policy'; $(tail -5 "$tmp/memory.log")"
policy=$(numa_policy --set runtime.bind=none)
[[ $policy == default ]] || fail "bind = none must leave the default memory policy, not '$policy'"
echo "version under mpirun: ok"
