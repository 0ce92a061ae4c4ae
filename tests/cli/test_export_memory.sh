#!/usr/bin/env bash
# `superoffload export` streams tensor by tensor (#52): its peak resident memory above the
# fixed part (the program, LibTorch, the model's structure) stays below twice the largest
# tensor, however large the model. A 101M-parameter Llama of 32 layers (406 MB of fp32 weights,
# largest tensor 2.8 MB) against the tiny demo model (9.4M): their exports' peak RSS, measured by
# getrusage, may differ by at most 2 × 2.8 MB plus 48 MB of allocator noise (measured: 3.5
# MiB). An export that buffered a shard (as it did) or a layer at a time (as the checkpoint fill
# did) holds 200 MB (bf16) or more of it, and one that allocated a buffer per tensor held 126
# MiB (freed pages kept by glibc's heap among the model's untouched parameters): both fail. Weights larger than this machine's memory are not tried: their
# checkpoint (master and moments in fp32) would not fit its disk.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
mkdir -p "$tmp/big"
cp configs/models/tiny-llama/tokenizer* "$tmp/big/"
"$SO_PYTHON" - configs/models/tiny-llama/config.json "$tmp/big/config.json" <<'PY' || fail "big config"
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=512, intermediate_size=1376, num_hidden_layers=32, num_attention_heads=8, num_key_value_heads=8,
         head_dim=64)
json.dump(c, open(sys.argv[2], "w"))
PY
for model in tiny big; do
  path=configs/models/tiny-llama
  [[ $model == big ]] && path=$tmp/big
  train_one_step "$path" "$tmp/$model"
  peak_rss_kib "$tmp/$model.rss" "$SO_BIN" export "$tmp/$model" --to "$tmp/${model}_hf" --dtype bf16 \
    --max-shard-size 100MB > "$tmp/${model}_export.log" 2>&1 || fail "export of $model: $(tail -20 "$tmp/${model}_export.log")"
done
tiny_kib=$(tail -1 "$tmp/tiny.rss") big_kib=$(tail -1 "$tmp/big.rss")
[[ -f $tmp/big_hf/model-00003-of-00003.safetensors ]] || fail "the big export is not in 3 shards of 100 MB: $(ls "$tmp/big_hf")"
largest_kib=$((512 * 1376 * 4 / 1024))
limit_kib=$((2 * largest_kib + 48 * 1024))
echo "export peak RSS: tiny model $((tiny_kib / 1024)) MiB, 101M model $((big_kib / 1024)) MiB:" \
  "$(((big_kib - tiny_kib) / 1024)) MiB more (limit $((limit_kib / 1024)) MiB; its bf16 weights are 203 MB)"
((big_kib - tiny_kib <= limit_kib)) || fail "the export of the 101M model held $(((big_kib - tiny_kib) / 1024)) MiB more" \
  "than the tiny model's: it does not stream tensor by tensor"
"$SO_PYTHON" - "$tmp/big_hf" <<'PY' || fail "the big export does not read back"
import json, sys
from safetensors import safe_open
index = json.load(open(f"{sys.argv[1]}/model.safetensors.index.json"))
count = 0
for shard in sorted(set(index["weight_map"].values())):
    with safe_open(f"{sys.argv[1]}/{shard}", "pt") as f:
        count += len(list(f.keys()))
assert count == len(index["weight_map"]) == 2 + 32 * 9 + 1, count
PY
echo "export: streams tensor by tensor (peak RSS within twice the largest tensor of the fixed part)"
