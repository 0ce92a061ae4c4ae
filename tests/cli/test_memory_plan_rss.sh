#!/usr/bin/env bash
# The host memory plan against the measured peak RSS (#32, #52): every rank's peak resident set
# (/ranks/host_peak_rss_bytes in metrics.h5, from getrusage) lies within -5% / +10% (or up to
# 48 MiB over: see SO_PLAN_OVER_BYTES) of the plan's host bytes per rank (file attribute
# planned_host_bytes) — the tiny model at 1, 2 and 8 ranks, a small mixture of experts at 2
# ranks without and with expert parallelism, and with SO_PLAN_125M=1 (label slow) a
# ~125M-parameter Llama at 1, 2 and 8 ranks. The same for the other commands, from the "host
# memory:" line each logs at its end: `export` (bf16) of each model's 1-rank checkpoint, `eval`
# of the exported model, and `prepare` of a 2M-token JSONL at 1 and 2 ranks; and whole 1-rank
# runs with checkpoint saves (optimizer state on NVMe; async). (bench/host_plan_matrix.sh runs
# the whole matrix: bf16, bf16 moments, NVMe.)
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 60000 > /dev/null || fail "demo corpus"
# 16 sequences of 257 byte-level token ids for eval (valid in every vocabulary here).
"$SO_PYTHON" - "$tmp/eval.h5" <<'PY' || fail "eval tokens"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["tokens"] = np.random.default_rng(0).integers(0, 256, size=(16, 257), dtype=np.int64)
PY
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
# Over the peak, the plan may also be off by up to 48 MiB where that is more than 10%: its
# allocator-slack term (train/memory_plan.hpp, 40 MiB) was measured at 35-45 MiB on Sapphire Rapids
# and is about 20 MiB on an AMD EPYC, and a tiny run's whole process is 0.25-0.5 GiB since LibTorch's
# CUDA backend is no longer loaded on CPU-only machines (313 MiB less RSS a process). Loaded, the
# same runs' plans were 19-42 MiB over their peaks as they are now, within +10% of the larger peak.
export SO_PLAN_OVER_BYTES=$((48 << 20))
# check DIR LABEL: the run's plan within -5% / +10% (or 48 MiB) of each rank's peak RSS.
check() {
  "$SO_PYTHON" - "$1/metrics.h5" "$2" <<'PY' || off+=("$2")
import os, sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
planned = float(f.attrs["planned_host_bytes"])
rss = f["ranks/host_peak_rss_bytes"][-1]
ratio = planned / rss
print(f"{sys.argv[2]}: plan {planned / 2**30:.2f} GiB per rank, peak RSS "
      f"{rss.min() / 2**30:.2f}-{rss.max() / 2**30:.2f} GiB: plan/RSS {ratio.min():.3f}-{ratio.max():.3f}, "
      f"over by {(planned - rss.min()) / 2**20:.0f} MiB at most")
over_ok = (ratio <= 1.10) | (planned - rss <= float(os.environ["SO_PLAN_OVER_BYTES"]))
assert (ratio >= 0.95).all() and over_ok.all(), ratio
PY
}
# check_log LOG LABEL: the plan/peak of the command's "host memory:" line within 0.95-1.10 (or 48 MiB over).
check_log() {
  "$SO_PYTHON" - "$1" "$2" <<'PY' || off+=("$2")
import os, re, sys
lines = [l for l in open(sys.argv[1]) if "host memory: peak RSS" in l]
assert lines, "no 'host memory:' line in " + sys.argv[1]
ratio = float(re.search(r"plan/peak ([0-9.]+)", lines[-1]).group(1))
plan = float(re.search(r"plan ([0-9.]+) GiB", lines[-1]).group(1)) * 2**30
over = plan * (1 - 1 / ratio)  # the plan is printed to 0.01 GiB, the ratio to 0.001
print(f"{sys.argv[2]}: {lines[-1].split('host memory: ')[1].split(':')[0]}")
assert 0.95 <= ratio and (ratio <= 1.10 or over <= float(os.environ["SO_PLAN_OVER_BYTES"])), ratio
PY
}
for entry in "${models[@]}"; do
  name=${entry%%:*} model=${entry#*:}
  for ranks in 1 2 8; do
    dir=$tmp/$name-$ranks
    save=false
    ((ranks == 1)) && save=true  # exported below
    "$MPIEXEC" -np "$ranks" --oversubscribe "$SO_BIN" train configs/tiny.toml --set model.path="$model" \
      --set data.path="$tmp/corpus.jsonl" --set training.output_dir="$dir" --set training.max_steps=2 \
      --set checkpoint.every_steps=0 --set checkpoint.save_on_exit=$save > "$dir.log" 2>&1 ||
      fail "$name on $ranks rank(s): $(tail -10 "$dir.log")"
    check "$dir" "$(printf '%4s' "$name") on $ranks rank(s)"
  done
  "$SO_BIN" export "$tmp/$name-1" --to "$tmp/$name-hf" --dtype bf16 > "$tmp/$name-export.log" 2>&1 ||
    fail "export of $name: $(tail -5 "$tmp/$name-export.log")"
  check_log "$tmp/$name-export.log" "$(printf '%4s' "$name") export"
  "$SO_BIN" eval --model "$tmp/$name-hf" --tokens "$tmp/eval.h5" > "$tmp/$name-eval.log" 2>&1 ||
    fail "eval of $name: $(tail -5 "$tmp/$name-eval.log")"
  check_log "$tmp/$name-eval.log" "$(printf '%4s' "$name") eval"
done
# Checkpoint saves, measured over the whole process (metrics.h5's per-step peaks end before a
# save on exit): a run whose optimizer state is on NVMe exports it a layer at a time as it saves
# (until 2026-11-28 all layers at once: 12 bytes a parameter beyond the plan, a 1.5B run
# OOM-killed at its first save); `async_save` copies the whole state first, which the plan counts.
# whole_run LABEL DIR SETTING...: tiny on 1 rank, 2 steps, its plan within -5% / +10% (or 48 MiB) of the peak.
whole_run() {
  local label=$1 dir=$2
  shift 2
  peak_rss_kib "$dir.kib" "$SO_BIN" train configs/tiny.toml --set model.path=configs/models/tiny-llama \
    --set data.path="$tmp/corpus.jsonl" --set training.output_dir="$dir" --set training.max_steps=2 "$@" \
    > "$dir.log" 2>&1 || fail "$label: $(tail -10 "$dir.log")"
  [[ -f $dir/checkpoints/step_00000002/DONE ]] || fail "$label saved no checkpoint of step 2: $dir.log"
  "$SO_PYTHON" - "$dir/metrics.h5" "$(cat "$dir.kib")" "$label" <<'PY' || off+=("$label")
import os, sys, h5py
planned = float(h5py.File(sys.argv[1], "r").attrs["planned_host_bytes"])
peak = float(sys.argv[2]) * 1024
print(f"{sys.argv[3]}: plan {planned / 2**30:.3f} GiB, whole-process peak {peak / 2**30:.3f} GiB: plan/peak {planned / peak:.3f}")
assert 0.95 <= planned / peak and (planned / peak <= 1.10 or planned - peak <= float(os.environ["SO_PLAN_OVER_BYTES"])), planned / peak
PY
}
mkdir -p "$tmp/swap"
whole_run "tiny on 1 rank, NVMe, saved on exit" "$tmp/nvme-save" --set checkpoint.every_steps=0 \
  --set checkpoint.save_on_exit=true --set offload.device='"nvme"' --set offload.nvme_path="\"$tmp/swap\""
whole_run "tiny on 1 rank, async saves every step" "$tmp/async-save" --set checkpoint.every_steps=1 \
  --set checkpoint.async_save=true --set checkpoint.save_on_exit=false
grep -q "written in the background" "$tmp/async-save.log" || fail "the async saves were not written in the background"
"$SO_DEMO_CORPUS" "$tmp/prepare.jsonl" --tokens 2000000 > /dev/null || fail "demo corpus for prepare"
for ranks in 1 2; do
  "$MPIEXEC" -np "$ranks" --oversubscribe "$SO_BIN" prepare configs/tiny.toml --set data.path="$tmp/prepare.jsonl" \
    -o "$tmp/prepared.h5" > "$tmp/prepare-$ranks.log" 2>&1 || fail "prepare on $ranks rank(s): $(tail -5 "$tmp/prepare-$ranks.log")"
  check_log "$tmp/prepare-$ranks.log" "prepare on $ranks rank(s)"
done
# A mixture of experts (Qwen3-30B-A3B's shape scaled down: 32 experts, top-4) at 2 ranks, without
# and with expert parallelism, which gathers a layer's own experts only.
mkdir -p "$tmp/moe"
cp configs/models/tiny-llama/tokenizer* "$tmp/moe/"
"$SO_PYTHON" - configs/models/qwen3-30b-a3b/config.json configs/models/tiny-llama/config.json "$tmp/moe/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=256, moe_intermediate_size=128, intermediate_size=768, num_hidden_layers=4, head_dim=64,
         num_attention_heads=4, num_key_value_heads=2, vocab_size=json.load(open(sys.argv[2]))["vocab_size"],
         num_experts=32, num_experts_per_tok=4, max_window_layers=4, max_position_embeddings=1024)
json.dump(c, open(sys.argv[3], "w"))
PY
for ep in 1 2; do
  dir=$tmp/moe-ep$ep
  "$MPIEXEC" -np 2 --oversubscribe "$SO_BIN" train configs/tiny.toml --set model.path="$tmp/moe" \
    --set data.path="$tmp/corpus.jsonl" --set training.output_dir="$dir" --set training.max_steps=2 \
    --set moe.expert_parallel_size=$ep --set checkpoint.every_steps=0 --set checkpoint.save_on_exit=false \
    > "$dir.log" 2>&1 || fail "MoE at expert_parallel_size $ep: $(tail -10 "$dir.log")"
  check "$dir" " MoE on 2 rank(s), expert_parallel_size $ep"
done
((${#off[@]} == 0)) || fail "the plan is not within -5% / +10% (or 48 MiB over) of the peak RSS: ${off[*]}"
echo "memory plan: within -5% / +10% of every rank's peak RSS"
