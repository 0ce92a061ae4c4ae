#!/usr/bin/env bash
# bench/gpu_session.sh --dry-run (#31): the one command of a lent GPU session cannot rot between
# sessions. Its plan is printed, its inputs (configs, the moonshot's shape, the scripts it runs)
# are checked, and a bundle, where one was made (bench/gpu_bundle.sh), holds what the session
# unpacks. A missing input fails the dry run.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

plan=$(bash bench/gpu_session.sh --dry-run --out "$tmp/out" 2>&1) || fail "dry run exited $?: $plan"
for part in setup env trace tests correctness memory moonshot long speed link profile moe; do
  expect_contains "$plan" "  $part " "the dry run's step list"
done
expect_contains "$plan" "ok       configs/models/llama-3.1-8b/config.json" "the moonshot's shape checked"
if grep -q MISSING <<<"$plan"; then fail "the dry run reports missing inputs: $plan"; fi
bash -n bench/gpu_session.sh bench/gpu_bundle.sh || fail "syntax"

# A missing input is caught: the same script beside a tree without the 8B shape.
mkdir -p "$tmp/tree/bench" "$tmp/tree/configs/models"
cp bench/gpu_session.sh bench/offload_modes.sh bench/scaled_llama.sh "$tmp/tree/bench/"
cp -r configs/tiny.toml configs/models/tiny-llama "$tmp/tree/configs/" 2>/dev/null
cp -r configs/models/tiny-llama "$tmp/tree/configs/models/"
broken=$(bash "$tmp/tree/bench/gpu_session.sh" --dry-run --out "$tmp/out2" --bundle "$tmp/none.tar.xz" 2>&1) &&
  fail "a dry run without configs/models/llama-3.1-8b passed: $broken"
expect_contains "$broken" "MISSING  configs/models/llama-3.1-8b/config.json" "the missing shape named"
expect_contains "$broken" "absent   bundle" "a missing bundle is reported, not an error"
echo "gpu_session.sh --dry-run: plan printed, inputs checked"
