#!/usr/bin/env bash
# `superoffload plugins` lists every file tried: the shipped plugins with what they handle,
# and refused ones with the reason naming both sides.
source "$(dirname "$0")/lib.sh"

out=$(SUPEROFFLOAD_PLUGIN_PATH="$SO_MISMATCHED_PLUGIN_DIR" "$SO_BIN" plugins 2>&1) || fail "plugins: $out"
expect_contains "$out" "$SO_MISMATCHED_PLUGIN_DIR" "search path shown"
expect_contains "$out" "moe 1.0.0: Qwen3MoeForCausalLM, MixtralForCausalLM, GptOssForCausalLM" "moe plugin"
expect_contains "$out" "gpt2 1.0.0: GPT2LMHeadModel" "gpt2 plugin"
expect_contains "$out" "requires in config.json: vocab_size, n_positions, n_embd, n_layer, n_head" "required keys shown"
expect_contains "$out" "refused  $SO_MISMATCHED_PLUGIN_DIR/libmismatched_abi_plugin.so" "ABI mismatch listed"
expect_contains "$out" "was built for plugin ABI version 4, this superoffload uses 3" "both ABI versions named"
expect_contains "$out" "refused  $SO_MISMATCHED_PLUGIN_DIR/libsuperoffload_modified_headers.so" "other headers listed"
expect_contains "$out" "was built against other superoffload plugin headers (ABI tag " "ABI tags named"
expect_contains "$out" "was built against LibTorch 1.13.1" "LibTorch mismatch"
echo "plugins CLI: ok"
