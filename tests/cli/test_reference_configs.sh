#!/usr/bin/env bash
# The reference-model configs and jobscripts: every config validates (keys, types, batch
# arithmetic) with the SuperOffload settings of its example, both modes of the launcher
# produce a valid configuration, and every jobscript names a config that exists.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

count=0
for config in configs/reference-models/*.toml; do
  name=$(basename "$config" .toml)
  out=$("$SO_BIN" config "$config" 2>&1) || fail "$config does not validate: $out"
  for expected in "bf16 = true" "activation_checkpointing = true" "train_micro_batch_size_per_gpu = 4" \
                  "super_offload = true" "cpuadam_cores_perc = 0.9" 'format = "alpaca"'; do
    expect_contains "$out" "$expected" "$config"
  done
  grep -Eq "^ratio = 0\.(8|9|95)( |$)" <<<"$out" || fail "$config: ratio must be 0.8-0.95"
  # The ZeRO-Offload mode of jobscripts/lib/run-reference.sh.
  out=$("$SO_BIN" config "$config" --set offload.super_offload=false --set offload.ratio=1.0 2>&1) \
    || fail "$config in zerooffload mode: $out"
  sbatch_file=jobscripts/$name.sbatch
  [[ -f $sbatch_file ]] || fail "no jobscript for $config"
  bash -n "$sbatch_file" || fail "$sbatch_file has a syntax error"
  grep -q "run-reference.sh\" $name " "$sbatch_file" || fail "$sbatch_file does not run $name"
  count=$((count + 1))
done
((count == 7)) || fail "expected the 7 reference models, found $count"
bash -n jobscripts/lib/run-reference.sh || fail "run-reference.sh has a syntax error"
# The long-context config (#50): valid at its 4 ranks with every long-context feature on, and
# its plan fits a node of 4 GH200 (96 GB each, 1,920 GB host); its jobscript runs it.
long=configs/long-context/llama-3.1-8b-128k.toml
out=$("$SO_BIN" config "$long" --world-size 4 2>&1) || fail "$long does not validate at 4 ranks: $out"
for expected in "sequence_parallel_size = 4" 'activation_offload = "host"' "seq_len = 131072"; do
  expect_contains "$out" "$expected" "$long"
done
out=$("$SO_BIN" plan "$long" --gpus-per-node 4 --gpu-memory 96 --host-memory 1920 2>&1) || fail "$long does not fit: $out"
expect_contains "$out" "each holding 32768 tokens" "$long's shard"
grep -q "CONFIG=$long" jobscripts/llama-3.1-8b-long-context.sbatch || fail "no jobscript runs $long"
# Every jobscript is preemptible and requeueable, and launches through srun --mpi=pmix.
for script in jobscripts/*.sbatch; do
  bash -n "$script" || fail "$script has a syntax error"
  for directive in "--signal=B:USR1@" "--requeue" "--cpus-per-task=" "--nodes=" "--ntasks-per-node="; do
    grep -q -- "#SBATCH $directive" "$script" || fail "$script lacks #SBATCH $directive"
  done
done
grep -q "srun --mpi=pmix" jobscripts/lib/run-reference.sh jobscripts/tiny-cpu.sbatch || fail "no srun --mpi=pmix launch"
grep -q "#SBATCH --nodes=2" jobscripts/llama-3.3-70b-2nodes.sbatch || fail "no multi-node example"
out=$(SLURM_SUBMIT_DIR=$PWD MODE=bogus bash jobscripts/lib/run-reference.sh phi-4 2>&1) && fail "MODE=bogus accepted"
expect_contains "$out" "use superoffload or zerooffload" "bad MODE message"
echo "reference configs: $count models validate in both modes"
