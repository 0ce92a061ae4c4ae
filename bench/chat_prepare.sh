#!/usr/bin/env bash
# Chat records against plain text through `superoffload prepare` (#34's speed bar: chat at
# >= 0.5x the tokens/s of plain JSON Lines of the same text, at 1 and 2 ranks).
#
# The chat corpus is the demo generator's (`superoffload_demo_corpus --chat`); the baseline is
# the same conversations rendered by HF transformers' apply_chat_template with the demo
# model's chat template, written as {"text": ...}: the same characters, tokenized without a
# template. Both are prepared with configs/tiny.toml (byte-level BPE, packing on, seq_len 1024
# so that nothing is cut), rounds interleaved; the figure is tokens / prepare's own
# "in N s" (reading, rendering, tokenizing, gathering, writing; not process start-up).
# Prints the CPU model and the SIMD extensions, each variant's median tokens/s, each round's
# chat/plain ratio (a pair of runs seconds apart), and last
#   summary: ranks=N chat_tokens_per_s=… plain_tokens_per_s=… ratio=… (the median of the rounds' ratios; bar 0.5)
#
#   bench/chat_prepare.sh [--chars 3000000] [--rounds 5]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
chars=3000000
rounds=5
while (($#)); do
  case $1 in
    --chars) chars=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "usage: bench/chat_prepare.sh [--chars N] [--rounds R]" >&2; exit 2 ;;
  esac
done
for tool in build/bin/superoffload build/bin/superoffload_demo_corpus .venv/bin/python; do
  [[ -x $tool ]] || { echo "bench/chat_prepare.sh: $tool is missing; run scripts/setup first" >&2; exit 1; }
done
source scripts/mpi-env.sh

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1) ($(nproc) cores)"
echo "simd: $(grep -m1 -o -w -E 'avx512f|avx2|sve2|sve|asimd' /proc/cpuinfo | sort -u | tr '\n' ' ')"

work=build/bench_chat_prepare
mkdir -p "$work"
build/bin/superoffload_demo_corpus "$work/chat.jsonl" --chat --tokens "$chars" --seed 34
.venv/bin/python - "$work/chat.jsonl" "$work/plain.jsonl" <<'PY'
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained("configs/models/tiny-llama")
with open(sys.argv[1]) as chat, open(sys.argv[2], "w") as plain:
    for line in chat:
        text = tokenizer.apply_chat_template(json.loads(line)["messages"], tokenize=False)
        plain.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
PY

results="$work/results.txt"
: > "$results"
for ((round = 1; round <= rounds; ++round)); do
  for ranks in 1 2; do
    for variant in plain chat; do
      log=$(mpirun -np "$ranks" build/bin/superoffload prepare configs/tiny.toml --set data.path="$work/$variant.jsonl" \
              --set data.seq_len=1024 --set data.packing=true --output "$work/$variant.h5" 2>&1) \
        || { echo "prepare failed ($variant, $ranks ranks):" >&2; echo "$log" >&2; exit 1; }
      line=$(grep "prepare: wrote" <<< "$log")
      tokens=$(sed -E 's/.* records, ([0-9]+) tokens.*/\1/' <<< "$line")
      seconds=$(sed -E 's/.* in ([0-9.e+-]+) s$/\1/' <<< "$line")
      echo "$ranks $variant $tokens $seconds" >> "$results"
    done
  done
done
.venv/bin/python - "$results" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
for ranks in ("1", "2"):
    rate = {}
    for variant in ("plain", "chat"):
        runs = [int(t) / float(s) for r, v, t, s in rows if r == ranks and v == variant]
        rate[variant] = runs
        print(f"ranks={ranks} {variant:5s} median {statistics.median(runs) / 1e6:6.2f} M tokens/s over {len(runs)} rounds "
              f"(min {min(runs) / 1e6:.2f}, max {max(runs) / 1e6:.2f})")
    # The ratio of each round's chat run to the plain run just before it: shared machines change
    # speed between rounds (this VM's runs differ up to 2x), a pair seconds apart much less.
    ratios = [c / p for p, c in zip(rate["plain"], rate["chat"])]
    ratio = statistics.median(ratios)
    print(f"ranks={ranks} ratios by round: {' '.join(f'{r:.2f}' for r in ratios)}")
    print(f"summary: ranks={ranks} chat_tokens_per_s={statistics.median(rate['chat']):.0f} "
          f"plain_tokens_per_s={statistics.median(rate['plain']):.0f} "
          f"ratio={ratio:.2f} (median of the rounds' ratios; bar 0.5: {'met' if ratio >= 0.5 else 'NOT met'})")
PY
