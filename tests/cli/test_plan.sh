#!/usr/bin/env bash
# Memory estimates: `plan` prints per-GPU and per-node host memory for the reference shapes
# (Llama-3.1-8B on 1 GH200, Llama-3.3-70B on 4), and `train` refuses a run that cannot fit
# this machine at start-up, before allocating, with the numbers and what would make it fit.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

# config.json of the two models (public hyperparameters; no weights needed for an estimate).
mkdir -p "$tmp/llama-3.1-8b" "$tmp/llama-3.3-70b"
common='"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_key_value_heads": 8,
        "vocab_size": 128256, "tie_word_embeddings": false, "rms_norm_eps": 1e-05, "rope_theta": 500000.0'
echo "{$common, \"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_hidden_layers\": 32,
       \"num_attention_heads\": 32}" > "$tmp/llama-3.1-8b/config.json"
echo "{$common, \"hidden_size\": 8192, \"intermediate_size\": 28672, \"num_hidden_layers\": 80,
       \"num_attention_heads\": 64}" > "$tmp/llama-3.3-70b/config.json"

out=$("$SO_BIN" plan configs/reference-models/llama-3.1-8b.toml --set model.path="$tmp/llama-3.1-8b" \
      --nodes 1 --gpus-per-node 1 --gpu-memory 96 --host-memory 480 2>&1) || fail "plan 8B: $out"
expect_contains "$out" "8.03B parameters" "8B parameter count"
expect_contains "$out" "per GPU:" "per-GPU line"
expect_contains "$out" "per node, host:" "per-node host line"
out=$("$SO_BIN" plan configs/reference-models/llama-3.3-70b.toml --set model.path="$tmp/llama-3.3-70b" \
      --nodes 1 --gpus-per-node 4 2>&1) || fail "plan 70B: $out"
expect_contains "$out" "70.6B parameters" "70B parameter count"
expect_contains "$out" "4 rank(s), 4 per node" "70B shape"
expect_contains "$out" "per node, host:" "per-node host line"
# The NVMe tier moves the CPU share's master and moments to the drive: far less host memory.
host_of() { sed -n 's/^per rank, host: .* = \([0-9.]*\) GiB.*/\1/p' <<< "$1" | head -1; }
in_memory=$(host_of "$out")
out=$("$SO_BIN" plan configs/reference-models/llama-3.3-70b.toml --set model.path="$tmp/llama-3.3-70b" \
      --set offload.device=nvme --set offload.nvme_path=/local_nvme --set zero.sub_group_size=100000000 \
      --nodes 1 --gpus-per-node 4 2>&1) || fail "plan 70B on NVMe: $out"
expect_contains "$out" "per rank, NVMe: optimizer state" "NVMe line"
on_nvme=$(host_of "$out")
[[ -n $in_memory && -n $on_nvme ]] || fail "no host figure in the plan: $out"
awk -v a="$in_memory" -v b="$on_nvme" 'BEGIN { exit !(b < a / 2) }' \
  || fail "host memory with the NVMe tier ($on_nvme GiB) is not far below in memory ($in_memory GiB)"

# 70B on two CPU ranks of this machine: refused at once, not killed by the OOM killer later.
start=$SECONDS
out=$("$MPIEXEC" -np 2 "$SO_BIN" train configs/tiny.toml --set model.path="$tmp/llama-3.3-70b" \
      --set data.path="$tmp/unused.jsonl" --set training.output_dir="$tmp/run" 2>&1) && fail "the 70B run was accepted"
expect_contains "$out" "GB of host memory on this node" "the need is stated"
expect_contains "$out" "available: it would be killed by the out-of-memory killer" "the reason"
expect_contains "$out" "HINT: run on about" "what would make it fit"
((SECONDS - start < 30)) || fail "the refusal took $((SECONDS - start)) s"
echo "plan: 8B and 70B estimates printed; a run that cannot fit is refused at start-up"
