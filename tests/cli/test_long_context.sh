#!/usr/bin/env bash
# Long-context training, on the CPU (#50). Activation checkpoints in host memory ([model]
# activation_offload = "host"): on the CPU the same store / prefetch / take path runs with
# host-to-host copies on a copy thread. Two
# ranks, two micro-batches per step (buffers reused), 5 steps: losses and gradient norms must be
# bitwise those of the run that keeps the inputs — also with every copy made 20 ms late
# (SUPEROFFLOAD_TEST_ACTIVATION_COPY_DELAY_MS), so a recompute that did not wait for its input
# would read a buffer not yet written and leave the reference. On a GPU (pinned buffers, a copy
# stream), tests/gpu/test_copy_lag.sh makes the same comparison with both directions lagged.
# A config that offloads without checkpointing is refused, naming both keys.
# MLP tiles ([model] tile_tokens = 16 of each micro-batch's 64 tokens, with the offload): the
# same training to fp32 round-off (products over fewer rows round differently).
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"
on_device cpu

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
run() {  # NAME [ENV=...] -- [--set ...]: train_short with that environment
  local name=$1 env=()
  shift
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  (((${#env[@]})) && export "${env[@]}"; train_short "$tmp/$name" --set training.max_steps=5 "$@") \
    > "$tmp/$name.log" 2>&1 || fail "$name: $(tail -5 "$tmp/$name.log")"
}
run kept -- --set model.activation_offload=\"none\"
run offloaded -- --set model.activation_offload=\"host\"
run late SUPEROFFLOAD_TEST_ACTIVATION_COPY_DELAY_MS=20 -- --set model.activation_offload=\"host\"
run tiled -- --set model.activation_offload=\"host\" --set model.tile_tokens=16
expect_contains "$(cat "$tmp/tiled.log")" "MLP tiles: 16 tokens of each micro-batch's 64" "the start-up log names the tiles"
# The delay reached the copies: the tiny model's 6 blocks make 12 copies per micro-batch, one
# after another on the copy thread, and each micro-batch's last take waits for them: up to
# 10 micro-batches x 12 x 20 ms = 2.4 s of waiting, less what the computation overlapped.
waited() { sed -nE 's/.*activation offload: .*, ([0-9.e+-]+) s waited for copies.*/\1/p' "$tmp/$1.log" | head -1; }
echo "waited for copies: $(waited late) s with the delay, $(waited offloaded) s without"
awk -v late="$(waited late)" 'BEGIN { exit !(late > 0.6) }' || fail "the 20 ms copy delay did not show: $(waited late) s waited"
expect_contains "$(cat "$tmp/offloaded.log")" "activation offload: each layer's checkpointed input" "the start-up log says so"

"$SO_PYTHON" - "$tmp" <<'PY' || fail "offloaded activations changed training"
import sys, h5py, numpy as np
def series(name):
    with h5py.File(f"{sys.argv[1]}/{name}/metrics.h5", "r") as f:
        return f["train"]["loss"][...], f["train"]["grad_norm"][...]
kept = series("kept")
assert len(kept[0]) == 5, kept
for name in ("offloaded", "late"):
    run = series(name)
    for what, a, b in (("loss", kept[0], run[0]), ("grad norm", kept[1], run[1])):
        assert np.array_equal(a, b), f"{name}: {what} {b} differs from the run that keeps its activations: {a}"
print("offloaded and late-copied runs equal the kept run bitwise:", kept[0])
tiled = series("tiled")
gaps = [float(np.abs(t / k - 1).max()) for t, k in zip(tiled, kept)]
print(f"tiled MLPs: loss {gaps[0]:.1e}, grad norm {gaps[1]:.1e} from the untiled run (relative)")
assert gaps[0] <= 2e-6 and gaps[1] <= 2e-5, (tiled, kept)
PY

out=$("$SO_BIN" config configs/tiny.toml --set model.activation_offload=\"host\" \
  --set training.activation_checkpointing=false --set data.path="$tmp/corpus.jsonl" 2>&1) \
  && fail "offload without checkpointing was accepted: $out"
expect_contains "$out" "[model] activation_offload = \"host\"" "the refusal names the offload key"
expect_contains "$out" "activation_checkpointing = true" "and says what to set"
echo "long context: activation offload bitwise equal (also with late copies), MLP tiles equal to round-off"
