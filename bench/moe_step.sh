#!/usr/bin/env bash
# The MoE step before and after the grouped experts (#49): Qwen3-30B-A3B's reference config
# (configs/models/qwen3-30b-a3b: 128 experts, top-8, its attention and router shapes) scaled
# to fit the machine (hidden, expert intermediate and layers cut down, the experts kept), random
# weights, trained by `superoffload train` with the per-expert loop (SUPEROFFLOAD_MOE_EXPERTS=
# loop, what the plugin ran before) and with the grouped products, back to back, same data and
# steps. Prints each row's tokens/s from the run's summary (warm-up steps left out), the
# losses of both (they must agree to round-off) and the ratio grouped / loop.
# With --expert-parallel P the rows are instead the grouped path without and with [moe]
# expert_parallel_size = P (at --ranks, a multiple of P), each with its peak gathered parameter
# elements per rank.
#
#   bench/moe_step.sh [--hidden 512] [--intermediate 192] [--layers 2] [--seq 512] [--micro 2]
#                     [--steps 4] [--ranks 1] [--device cpu] [--bf16 false] [--build build]
#                     [--expert-parallel P]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
hidden=512 intermediate=192 layers=2 seq=512 micro=2 steps=4 ranks=1 device=cpu bf16=false build=$here/build ep=0
while (($#)); do
  case $1 in
    --hidden) hidden=$2 ;; --intermediate) intermediate=$2 ;; --layers) layers=$2 ;; --seq) seq=$2 ;;
    --micro) micro=$2 ;; --steps) steps=$2 ;; --ranks) ranks=$2 ;; --device) device=$2 ;; --bf16) bf16=$2 ;;
    --build) build=$2 ;; --expert-parallel) ep=$2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "moe_step.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift 2
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=$work/model
mkdir -p "$model"
cp "$here"/configs/models/tiny-llama/tokenizer* "$model/"
# The reference shape with the sizes cut; heads of 64 so that any hidden of 128·k works.
python3 - "$here/configs/models/qwen3-30b-a3b/config.json" "$model/config.json" "$hidden" "$intermediate" "$layers" \
  "$here/configs/models/tiny-llama/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
hidden, inter, layers = map(int, sys.argv[3:6])
vocab = json.load(open(sys.argv[6]))["vocab_size"]  # the demo tokenizer's
c.update(hidden_size=hidden, moe_intermediate_size=inter, intermediate_size=3 * hidden, num_hidden_layers=layers,
         head_dim=64, num_attention_heads=hidden // 64, num_key_value_heads=max(1, hidden // 256), vocab_size=vocab,
         max_window_layers=layers, max_position_embeddings=max(4096, 2 * 512))
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
"$build/bin/superoffload_demo_corpus" "$work/corpus.jsonl" --tokens $((seq * micro * ranks * (steps + 2) * 2)) > /dev/null
source "$here/scripts/mpi-env.sh" 2> /dev/null || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "moe_step: $(sed -nE 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(nproc) cores, device $device; Qwen3-30B-A3B's"\
  "128 experts top-8 at hidden $hidden, expert intermediate $intermediate, $layers layers, seq $seq x $micro, $ranks rank(s)"
declare -A rate loss
rows=(loop grouped)
((ep > 0)) && rows=(ep1 "ep$ep")
for path in "${rows[@]}"; do
  env_path=() ep_size=1
  [[ $path == loop ]] && env_path=(-x SUPEROFFLOAD_MOE_EXPERTS=loop)
  [[ $path == ep* ]] && ep_size=${path#ep}
  mpirun -np "$ranks" --oversubscribe "${env_path[@]}" "$build/bin/superoffload" train "$here/configs/tiny.toml" \
    --set model.path="$model" --set data.path="$work/corpus.jsonl" --set data.seq_len="$seq" \
    --set training.train_micro_batch_size_per_gpu="$micro" --set training.max_steps=$((steps + 1)) \
    --set training.timing_warmup_steps=1 --set training.output_dir="$work/$path" --set checkpoint.every_steps=0 \
    --set checkpoint.save_on_exit=false --set runtime.device="$device" --set precision.bf16="$bf16" \
    --set moe.expert_parallel_size="$ep_size" > "$work/$path.log" 2>&1 || { echo "moe_step: the $path run failed:"; tail -20 "$work/$path.log"; exit 1; }
  rate[$path]=$(sed -nE 's/.*summary:.*, ([0-9.]+) tokens\/s.*/\1/p' "$work/$path.log")
  loss[$path]=$(sed -nE 's/.*Step [0-9]+\/[0-9]+ \| Loss ([0-9.]+).*/\1/p' "$work/$path.log" | tr '\n' ' ')
  gathered=$(sed -nE 's/.*peak gathered ([0-9]+).*/\1/p' "$work/$path.log")
  printf '  %-8s %10s tokens/s   peak gathered %s elements per rank   losses %s\n' "$path" "${rate[$path]}" \
    "$gathered" "${loss[$path]}"
done
if ((ep > 0)); then
  awk -v g="${rate[ep$ep]}" -v l="${rate[ep1]}" -v p="$ep" \
    'BEGIN { printf "summary: expert_parallel_size %d / none tokens/s = %.2fx\n", p, g / l }'
else
  awk -v g="${rate[grouped]}" -v l="${rate[loop]}" 'BEGIN { printf "summary: grouped/loop tokens/s = %.2fx\n", g / l }'
fi
