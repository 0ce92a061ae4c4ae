#!/usr/bin/env bash
# The copy stream made late (label gpu; skipped where no GPU is visible): tests/gpu/d2h_lag.cpp,
# preloaded, sleeps 20 ms on the stream before every device-to-host copy, so each reduced
# gradient of the CPU share reaches host memory well after backward has moved on. The CPU
# optimizer must wait for it: the lagged run's losses equal the unlagged run's (same GPU, same
# kernels), with reduce buckets small enough that every layer arrives in several chunks, with
# speculation "always" (CPU steps during backward) and "auto" at clipping 1.0.
source "$(dirname "$0")/../cli/lib.sh"
cd "$SO_SOURCE_DIR"

if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIPPED: no GPU visible (nvidia-smi -L lists none)"
  exit 0
fi
[[ -f ${SO_D2H_LAG:-} ]] || fail "SO_D2H_LAG names no built shim: '${SO_D2H_LAG:-}'"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 100000 > /dev/null || fail "demo corpus"
train() {  # train NAME [ENV=...] -- [--set ...]
  local name=$1
  shift
  local env=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  "$MPIEXEC" -np 1 env "${env[@]}" "$SO_BIN" train configs/tiny.toml --set training.output_dir="$tmp/$name" \
    --set data.path="$tmp/corpus.jsonl" --set data.seq_len=64 --set training.max_steps=8 \
    --set checkpoint.every_steps=0 --set checkpoint.save_on_exit=false --set runtime.device=cuda \
    --set zero.reduce_bucket_size=20000 "$@" 2>&1
}
losses() { sed -nE 's/.*Step ([0-9]+)\/[0-9]+ \| Loss ([0-9.e+-]+).*/\1 \2/p' <<<"$1"; }

for speculation in always auto; do
  plain=$(train "plain_$speculation" -- --set offload.speculation=$speculation) || fail "unlagged run exited $?: $plain"
  lagged=$(train "lagged_$speculation" LD_PRELOAD="$SO_D2H_LAG" SO_D2H_LAG_MS=20 -- \
    --set offload.speculation=$speculation) || fail "lagged run exited $?: $lagged"
  copies=$(sed -nE 's/.*d2h_lag: ([0-9]+) device-to-host copies delayed.*/\1/p' <<<"$lagged" | head -1)
  [[ ${copies:-0} -gt 8 ]] || fail "the shim delayed ${copies:-no} copies (not preloaded?): $lagged"
  [[ $(losses "$lagged" | wc -l) -eq 8 ]] || fail "expected 8 step lines from the lagged run: $lagged"
  join <(losses "$plain") <(losses "$lagged") | awk -v s=$speculation '
    { rel = ($2 - $3) / $2; if (rel < 0) rel = -rel; if (rel > worst) worst = rel }
    END { printf "speculation %s: worst relative difference lagged vs unlagged %.2e\n", s, worst; exit !(worst < 1e-5) }' ||
    fail "with the copy stream late, speculation $speculation: losses moved (a gradient read before it landed)"
  echo "speculation $speculation: $copies copies delayed 20 ms each, losses unchanged"
done

# Activation checkpoints in host memory ([model] activation_offload = "host"): out to host
# memory in forward, back in backward, on the copy stream; both directions lagged 20 ms
# (SO_LAG_H2D=1). The compute stream must wait for each input's event: losses stay those of
# the run that keeps its activations on the device.
kept=$(train act_kept -- --set model.activation_offload=\"none\") || fail "activations kept: $kept"
offloaded=$(train act_lagged LD_PRELOAD="$SO_D2H_LAG" SO_D2H_LAG_MS=20 SO_LAG_H2D=1 -- \
  --set model.activation_offload=\"host\") || fail "activations offloaded, lagged: $offloaded"
[[ $offloaded == *"activation offload: each layer's checkpointed input in pinned host memory"* ]] ||
  fail "the offloaded run did not say its activations are in pinned host memory: $offloaded"
join <(losses "$kept") <(losses "$offloaded") | awk '
  { rel = ($2 - $3) / $2; if (rel < 0) rel = -rel; if (rel > worst) worst = rel }
  END { printf "activation offload, lagged: worst relative difference %.2e\n", worst; exit !(NR == 8 && worst < 1e-5) }' ||
  fail "with activation copies late, losses moved (an input read before it came back)"
