#!/usr/bin/env bash
# `mpirun -np 2 superoffload version` shows both ranks with disjoint core sets, whether the
# launcher bound them or superoffload did.
source "$(dirname "$0")/lib.sh"

for binding in "" "--bind-to none"; do
  # shellcheck disable=SC2086
  out=$("$MPIEXEC" -np 2 $binding "$SO_BIN" version 2>&1) || fail "version under mpirun $binding: $out"
  expect_contains "$out" "LibTorch" "versions"
  expect_contains "$out" "2 rank(s) on 1 node(s)" "world"
  rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 9' <<<"$out")
  [[ $(wc -l <<<"$rows") == 2 ]] || fail "expected 2 table rows ($binding):
$out"
  cpus0=$(awk '$1 == 0 {print $5}' <<<"$rows")
  cpus1=$(awk '$1 == 1 {print $5}' <<<"$rows")
  [[ -n $cpus0 && -n $cpus1 && $cpus0 != "$cpus1" ]] || fail "ranks share cpus ($binding): $cpus0 / $cpus1
$out"
  [[ $out != *"share CPUs"* ]] || fail "unexpected sharing warning ($binding): $out"
done
echo "version under mpirun: ok"
