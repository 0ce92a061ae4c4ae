#!/usr/bin/env bash
# `superoffload config`: the reference prints, a misspelt key fails with key, file:line and
# a suggestion, and the SuperOffload example DeepSpeed configs import.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

out=$("$SO_BIN" config configs/reference.toml 2>&1) || fail "config configs/reference.toml exited $?: $out"
expect_contains "$out" "[offload]" "effective config"
expect_contains "$out" "sub_group_size = 1000000000" "defaults filled in"
expect_contains "$out" "train_batch_size = 1  # derived for world size 1" "derived batch size"

"$SO_BIN" config --reference > "$tmp/ref.toml" || fail "config --reference"
cmp -s "$tmp/ref.toml" configs/reference.toml || fail "configs/reference.toml differs from config --reference"

printf '[model]\npath = "/m"\n[data]\npath = "/d"\n[zero]\nsub_grup_size = 4e8\n' > "$tmp/typo.toml"
out=$("$SO_BIN" config "$tmp/typo.toml" 2>&1)
code=$?
[[ $code == 2 ]] || fail "a misspelt key should exit 2, got $code"
expect_contains "$out" "unknown key 'sub_grup_size' in [zero] at $tmp/typo.toml:6:1 — did you mean 'sub_group_size'?" "typo"

for mode in superoffload zerooffload; do
  out=$("$SO_BIN" config --deepspeed-config "tests/data/deepspeed/${mode}_mode.json" \
        --set model.path=/m --set data.path=/d 2>&1) || fail "DeepSpeed $mode config did not import: $out"
  expect_contains "$out" "reduce_bucket_size = " "$mode import"
done

out=$(OMPI_ALLOW_RUN_AS_ROOT=1 "$MPIEXEC" -np 2 "$SO_BIN" config configs/reference.toml \
      --set training.train_batch_size=7 2>&1)
code=$?
[[ $code == 2 ]] || fail "an inconsistent batch size under 2 ranks should exit 2, got $code: $out"
expect_contains "$out" "train_batch_size = 7 is not a multiple of the world size 2" "batch check"
[[ $(grep -c "invalid configuration" <<<"$out") == 1 ]] || fail "the error should be reported once, not per rank: $out"
echo "config CLI: ok"
