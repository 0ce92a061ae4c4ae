#!/usr/bin/env bash
# The host memory plan against the measured peak RSS (#32): every rank's peak resident set
# (/ranks/host_peak_rss_bytes in metrics.h5, from getrusage) lies within -5% / +20% of the
# plan's host bytes per rank (file attribute planned_host_bytes) — the tiny model at 1, 2 and 8
# ranks, and with SO_PLAN_125M=1 (label slow) a ~125M-parameter Llama at 1, 2 and 8 ranks.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 60000 > /dev/null || fail "demo corpus"
models=("tiny:configs/models/tiny-llama")
if [[ ${SO_PLAN_125M:-0} == 1 ]]; then
  mkdir -p "$tmp/m125"
  # GPT-2 small's size as a Llama: 12 layers of 768, a 32000-token vocabulary (~125M parameters).
  cat > "$tmp/m125/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 768, "intermediate_size": 2048,
 "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 12, "max_position_embeddings": 2048,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "initializer_range": 0.02, "tie_word_embeddings": false}
JSON
  cp configs/models/tiny-llama/tokenizer* "$tmp/m125/" 2>/dev/null
  models+=("125m:$tmp/m125")
fi
off=()
for entry in "${models[@]}"; do
  name=${entry%%:*} model=${entry#*:}
  for ranks in 1 2 8; do
    dir=$tmp/$name-$ranks
    "$MPIEXEC" -np "$ranks" --oversubscribe "$SO_BIN" train configs/tiny.toml --set model.path="$model" \
      --set data.path="$tmp/corpus.jsonl" --set training.output_dir="$dir" --set training.max_steps=2 \
      --set checkpoint.every_steps=0 --set checkpoint.save_on_exit=false > "$dir.log" 2>&1 ||
      fail "$name on $ranks rank(s): $(tail -10 "$dir.log")"
    "$SO_PYTHON" - "$dir/metrics.h5" "$name" "$ranks" <<'PY' || off+=("$name on $ranks rank(s)")
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
planned = float(f.attrs["planned_host_bytes"])
rss = f["ranks/host_peak_rss_bytes"][-1]
ratio = planned / rss
print(f"{sys.argv[2]:>4} on {sys.argv[3]} rank(s): plan {planned / 2**30:.2f} GiB per rank, peak RSS "
      f"{rss.min() / 2**30:.2f}-{rss.max() / 2**30:.2f} GiB: plan/RSS {ratio.min():.3f}-{ratio.max():.3f}")
assert (ratio >= 0.95).all() and (ratio <= 1.20).all(), ratio
PY
  done
done
((${#off[@]} == 0)) || fail "the plan is not within -5% / +20% of the peak RSS: ${off[*]}"
echo "memory plan: within -5% / +20% of every rank's peak RSS"
