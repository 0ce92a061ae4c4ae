#!/usr/bin/env bash
# `superoffload export` of a model larger than the memory it may use (#52). A 0.58B-parameter
# Llama (2.3 GB of fp32 weights, 1.16 GB in bf16) is trained for a step and its checkpoint
# exported in bf16 inside a memory cgroup whose limit is the tiny model's export peak (the
# program and its libraries) plus twice the largest tensor plus 64 MiB: below the bf16 weights
# themselves (and a cgroup charges the process's own pages, not the libraries' shared ones, so
# the margin is larger still). An export that held the model, a layer stack or a shard buffer
# is killed by the cgroup's OOM killer (with 2 x the largest tensor + 64 MiB alone, even the
# streaming one is: the limit bites); a streaming one finishes, and its safetensors equal,
# tensor for tensor, those of the same export without a limit. Needs a writable cgroup v1 memory
# controller or cgroup v2 (root); skipped (exit 77) otherwise. Label slow: the training step of
# the 0.58B and its 7 GB checkpoint take a few minutes here.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

cgroup=""
if [[ -w /sys/fs/cgroup/memory ]] && mkdir -p /sys/fs/cgroup/memory/so_export_$$ 2>/dev/null; then
  cgroup=/sys/fs/cgroup/memory/so_export_$$
  limit_file=memory.limit_in_bytes
elif [[ -w /sys/fs/cgroup/cgroup.subtree_control ]] && mkdir -p /sys/fs/cgroup/so_export_$$ 2>/dev/null &&
     [[ -f /sys/fs/cgroup/so_export_$$/memory.max ]]; then
  cgroup=/sys/fs/cgroup/so_export_$$
  limit_file=memory.max
fi
if [[ -z $cgroup ]]; then
  echo "SKIP: no writable memory cgroup here (needs root and cgroup v1's memory controller or cgroup v2)"
  exit 77
fi
trap 'rmdir "$cgroup" 2>/dev/null; rm -rf "$tmp"' EXIT

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
mkdir -p "$tmp/big"
cp configs/models/tiny-llama/tokenizer* "$tmp/big/"
hidden=1024 intermediate=2816 layers=40
"$SO_PYTHON" - configs/models/tiny-llama/config.json "$tmp/big/config.json" $hidden $intermediate $layers <<'PY' ||
import json, sys
c = json.load(open(sys.argv[1]))
hidden, intermediate, layers = map(int, sys.argv[3:6])
c.update(hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers, num_attention_heads=16,
         num_key_value_heads=16, head_dim=64, vocab_size=32000)
json.dump(c, open(sys.argv[2], "w"))
PY
  fail "big config"
for model in tiny big; do
  path=configs/models/tiny-llama
  [[ $model == big ]] && path=$tmp/big
  train_one_step "$path" "$tmp/$model"
done
# The fixed part: the tiny model's export peak (its weights are 38 MB).
peak_rss_kib "$tmp/tiny.rss" "$SO_BIN" export "$tmp/tiny" --to "$tmp/tiny_hf" --dtype bf16 \
  > "$tmp/tiny_export.log" 2>&1 || fail "export of the tiny model: $(tail -20 "$tmp/tiny_export.log")"
fixed=$(($(tail -1 "$tmp/tiny.rss") * 1024))
largest=$((32000 * hidden * 4))
weights=$(( (32000 * hidden * 2 + layers * (4 * hidden * hidden + 3 * hidden * intermediate + 2 * hidden) + hidden) * 4 ))
limit=$((fixed + 2 * largest + 64 * 1024 * 1024))
((2 * limit < weights)) || fail "the limit $((limit >> 20)) MiB is not below the bf16 weights' $((weights >> 21)) MiB"
echo "$limit" > "$cgroup/$limit_file"
echo "export of $((weights >> 20)) MiB of fp32 weights within a memory cgroup of $((limit >> 20)) MiB" \
  "(fixed part $((fixed >> 20)) MiB + 2 x the largest tensor $((largest >> 20)) MiB + 64 MiB)"
# Into the cgroup, then the export itself (exec: the same process).
bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' _ "$cgroup" \
  "$SO_BIN" export "$tmp/big" --to "$tmp/big_hf" --dtype bf16 --max-shard-size 200MB > "$tmp/big_export.log" 2>&1
code=$?
((code == 0)) || fail "the export inside $((limit >> 20)) MiB ended with $code (137: killed for memory): $(tail -5 "$tmp/big_export.log")"
grep "host memory:" "$tmp/big_export.log" | sed 's/.*export: /export: /'
"$SO_BIN" export "$tmp/big" --to "$tmp/big_hf_free" --dtype bf16 --max-shard-size 200MB > "$tmp/big_export_free.log" 2>&1 ||
  fail "the export without a limit: $(tail -5 "$tmp/big_export_free.log")"
"$SO_PYTHON" - "$tmp/big_hf" "$tmp/big_hf_free" <<'PY' || fail "the export inside the limit differs from the one without"
import json, sys
import torch
from safetensors import safe_open
def tensors(directory):
    index = json.load(open(f"{directory}/model.safetensors.index.json"))
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(f"{directory}/{shard}", "pt") as f:
            out.update({name: f.get_tensor(name) for name in f.keys()})
    return out
limited, free = tensors(sys.argv[1]), tensors(sys.argv[2])
assert len(limited) == 2 + 40 * 9 + 1 and limited.keys() == free.keys(), sorted(limited)[:5]
for name, t in limited.items():
    assert t.dtype == torch.bfloat16 and torch.equal(t, free[name]), name
PY
echo "export: a model larger than the memory it may use streams through it"
