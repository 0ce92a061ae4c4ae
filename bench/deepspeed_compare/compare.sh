#!/usr/bin/env bash
# superoffload against DeepSpeed on the same machine, same model, same settings, back to back:
# a Llama config.json (bench/scaled_llama.sh) with random weights, ZeRO stage 3, the optimizer
# offloaded to the CPU with the same ratio, cpuadam_cores_perc, sub-group and bucket sizes,
# bf16, activation checkpointing, micro-batch and sequence length. Each side runs SuperOffload
# and the ZeRO-Offload mode; prints steady-state ms/step and tokens/s, and our tokens/s over
# DeepSpeed's for each mode (the goal: >= 1.3 with clip 1.0, >= 1.0 with clip 0), the steps
# each side clipped (SuperOffload rolls those back), both sides' device and host memory peaks,
# and TFLOPS counted both ways: model FLOPs (6 N + 12 L h s per token, what MFU counts) and
# hardware FLOPs with the recomputed forward (8 N + 16 L h s), as the SuperOffload examples
# count. --clip takes one value, a comma list, or `both` (0 and 1.0). Random weights make
# every step clip at 1.0; a threshold above every norm (1e6) is the regime of real fine-tuning
# from pretrained weights, where a rollback is rare.
#
#   bench/deepspeed_compare/compare.sh [--hidden 3072] [--layers 32] [--seq 2048] [--micro 4]
#       [--clip 0|X|X,Y,...|both] [--steps 6] [--ranks 1] [--ratio 0.9] [--bf16 true] [--build build]
#       [--python PY] [--modes superoffload,zero-offload]
#   bench/deepspeed_compare/compare.sh --wheels DIR   (downloads/builds DeepSpeed and its
#       pure-Python needs as wheels into DIR, for a machine without a package index)
#
# --python: an interpreter that imports torch, deepspeed and transformers (default:
# build/deepspeed-venv/bin/python, made on first use from PyPI with the project's LibTorch).
# DeepSpeed's SuperOffload needs CUDA: on a machine without a GPU pass
# --modes zero-offload (DS_ACCELERATOR=cpu is then set), which checks the scripts, not speed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
hidden=3072 layers=32 seq=2048 micro=4 clip=1.0 steps=6 ranks=1 ratio=0.9 bf16=true build=$root/build
python="" modes="superoffload,zero-offload" wheels=""
while (($#)); do
  case $1 in
    --hidden) hidden=$2 ;; --layers) layers=$2 ;; --seq) seq=$2 ;; --micro) micro=$2 ;; --clip) clip=$2 ;;
    --steps) steps=$2 ;; --ranks) ranks=$2 ;; --ratio) ratio=$2 ;; --bf16) bf16=$2 ;; --build) build=$2 ;;
    --python) python=$2 ;; --modes) modes=$2 ;; --wheels) wheels=$2 ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift 2
done

if [[ -n $wheels ]]; then
  # DeepSpeed is a source package on PyPI: built into a wheel here. Its needs that a CUDA
  # image with PyTorch may lack, and transformers with its own, come as wheels.
  mkdir -p "$wheels"
  python3 -m pip wheel --no-deps -w "$wheels" deepspeed
  python3 -m pip download --no-deps --only-binary=:all: -d "$wheels" hjson py-cpuinfo msgpack ninja pydantic \
    pydantic-core annotated-types typing-inspection transformers accelerate psutil tokenizers safetensors \
    huggingface-hub regex tqdm pyyaml packaging filelock fsspec hf-xet
  ls "$wheels"
  exit 0
fi

[[ -x $build/bin/superoffload ]] || { echo "compare.sh: $build/bin/superoffload is missing: run scripts/setup" >&2; exit 2; }
if [[ -z $python ]]; then
  venv=$build/deepspeed-venv python=$build/deepspeed-venv/bin/python
  if ! "$python" -c "import deepspeed, transformers, accelerate" > /dev/null 2>&1; then
    echo "== making $venv (deepspeed and transformers from PyPI, LibTorch from .venv)" >&2
    python3 -m venv "$venv"
    torch_site=$("$root/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$torch_site" > "$site/superoffload-torch.pth"
    "$venv/bin/pip" install --quiet deepspeed transformers accelerate
  fi
fi
gpu=$("$python" -c "import torch; print(int(torch.cuda.is_available()))")
((gpu)) || export DS_ACCELERATOR=cpu

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$root/bench/scaled_llama.sh"
scaled_llama "$work/model" "$hidden" "$layers" "$seq" $((seq * micro * ranks * (steps + 3) * 2)) "$build"
sub_group=100000000 bucket=50000000

# Both sides print "ms tokens_per_s clipped_steps device_peak_GiB host_peak_GiB".
reader=$root/.venv/bin/python  # h5py; on a lent GPU machine bench/gpu_session.sh makes it
[[ -x $reader ]] || reader=$python
ours() {  # ours NAME CLIP SUPER_OFFLOAD
  local name=$1 clip=$2 super=$3
  mpirun -np "$ranks" --bind-to none "$build/bin/superoffload" train "$root/configs/tiny.toml" \
    --set model.path="$work/model" --set data.path="$work/model/corpus.jsonl" --set data.seq_len="$seq" \
    --set training.train_micro_batch_size_per_gpu="$micro" --set training.gradient_accumulation_steps=1 \
    --set training.gradient_clipping="$clip" --set training.activation_checkpointing=true --set precision.bf16="$bf16" \
    --set training.output_dir="$work/$name" --set checkpoint.every_steps=0 --set checkpoint.save_on_exit=false \
    --set training.timing_warmup_steps=2 --set training.bench_steps="$steps" --set offload.ratio="$ratio" \
    --set offload.super_offload="$super" --set offload.cpuadam_cores_perc=0.9 --set zero.sub_group_size=$sub_group \
    --set zero.reduce_bucket_size=$bucket --set zero.stage3_prefetch_bucket_size=$bucket \
    --set zero.stage3_param_persistence_threshold=100000 --set optimizer.lr=1e-5 --set lr_schedule.type=constant --set lr_schedule.min_lr=0 \
    --set lr_schedule.warmup_num_steps=0 \
    --set runtime.device=auto > "$work/$name.log" 2>&1 || { echo "$name failed:" >&2; tail -20 "$work/$name.log" >&2; exit 1; }
  local timing
  timing=$(sed -nE 's/.*mean step ([0-9.]+) ms over .*, ([0-9.]+) tokens\/s .*/\1 \2/p' "$work/$name.log")
  # Every step's norm (warm-up steps too, as DeepSpeed's side counts) and the peaks, from metrics.h5.
  echo "$timing $("$reader" - "$work/$name/metrics.h5" "$clip" <<'PY'
import sys, h5py, numpy as np
f, clip = h5py.File(sys.argv[1], "r"), float(sys.argv[2])
norms = f["train/grad_norm"][...]
peak = lambda key: np.nanmax(f[key][...]) / 2**30 if key in f and np.isfinite(f[key][...]).any() else float("nan")
print(int((norms > clip).sum()) if clip > 0 else 0, peak("train/device_peak_bytes"), peak("train/host_peak_rss_bytes"))
PY
)"
}

theirs() {  # theirs NAME CLIP SUPER_OFFLOAD
  local name=$1 clip=$2 super=$3
  local launch=("$python")
  ((ranks > 1)) && launch=("$python" -m torch.distributed.run --nproc_per_node "$ranks")
  "${launch[@]}" "$root/bench/deepspeed_compare/ds_train.py" --model "$work/model" --seq "$seq" --micro "$micro" \
    --steps "$steps" --warmup 2 --clip "$clip" --ratio "$ratio" --cores-perc 0.9 --sub-group-size $sub_group \
    --reduce-bucket-size $bucket --prefetch-bucket-size $bucket --persistence-threshold 100000 --bf16 "$bf16" \
    --super-offload "$super" --checkpointing true --json "$work/$name.json" > "$work/$name.log" 2>&1 ||
    { echo "$name failed:" >&2; tail -20 "$work/$name.log" >&2; exit 1; }
  grep "^deepspeed_compare:" "$work/$name.log" >&2
  "$python" -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['mean_step_ms'], r['tokens_per_s'], r['clipped_steps'],
    r['device_peak_bytes'] / 2**30, r['host_peak_rss_bytes'] / 2**30)" "$work/$name.json"
}

# FLOPs per token: model (6 N + 12 L h s) and hardware, with the recomputed forward (8 N + 16 L h s).
parameters=$("$reader" -c "import json; c = json.load(open('$work/model/config.json')); h, l, i, v = c['hidden_size'], \
  c['num_hidden_layers'], c['intermediate_size'], c['vocab_size']; kv = c['num_key_value_heads'] * c.get('head_dim', h // c['num_attention_heads']); \
  print(l * (2 * h * h + 2 * h * kv + 3 * h * i + 2 * h) + h + v * h * (1 if c.get('tie_word_embeddings') else 2))")
flops_model=$(awk -v n="$parameters" -v l="$layers" -v h="$hidden" -v s="$seq" 'BEGIN { printf "%.6g", 6 * n + 12 * l * h * s }')
flops_hardware=$(awk -v n="$parameters" -v l="$layers" -v h="$hidden" -v s="$seq" 'BEGIN { printf "%.6g", 8 * n + 16 * l * h * s }')

table() {  # table CLIP
  local clip=$1 mode super
  printf '\nmodel: hidden %s, %s layers (%s parameters), seq %s x micro-batch %s, %s rank(s), ratio %s, bf16 %s, gradient_clipping %s\n' \
    "$hidden" "$layers" "$parameters" "$seq" "$micro" "$ranks" "$ratio" "$bf16" "$clip"
  printf '  %-14s %10s %10s %11s %11s %8s %9s %13s %13s %21s\n' mode "ours ms" "DS ms" "ours tok/s" "DS tok/s" "ours/DS" \
    "clipped" "device GiB" "host GiB" "TFLOPS model (hw)"
  for mode in ${modes//,/ }; do
    case $mode in superoffload) super=true ;; zero-offload) super=false ;;
      *) echo "compare.sh: unknown mode '$mode' (superoffload, zero-offload)" >&2; exit 2 ;; esac
    read -r our_ms our_tps our_clipped our_device our_host < <(ours "ours_${mode}_$clip" "$clip" "$super")
    read -r ds_ms ds_tps ds_clipped ds_device ds_host < <(theirs "ds_${mode}_$clip" "$clip" "$super")
    awk -v m="$mode" -v a="$our_ms" -v b="$ds_ms" -v c="$our_tps" -v d="$ds_tps" -v oc="$our_clipped" -v dc="$ds_clipped" \
      -v od="$our_device" -v dd="$ds_device" -v oh="$our_host" -v dh="$ds_host" -v fm="$flops_model" -v fh="$flops_hardware" \
      'BEGIN { printf "  %-14s %10.1f %10.1f %11.0f %11.0f %8.2f %4d/%-4d %6.1f/%-6.1f %6.1f/%-6.1f %.3g(%.3g)/%.3g(%.3g)\n",
               m, a, b, c, d, c / d, oc, dc, od, dd, oh, dh, c * fm / 1e12, c * fh / 1e12, d * fm / 1e12, d * fh / 1e12 }'
  done
  echo "  (clipped, device and host peaks, TFLOPS: ours/DeepSpeed; device peaks are allocated bytes; TFLOPS for the job)"
}

echo "machine: $(lscpu | sed -nE 's/^Model name: +//p' | head -1), $(nproc) cores; GPU: $(
  nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo none)"
echo "DeepSpeed $("$python" -c 'import deepspeed; print(deepspeed.__version__)' 2>/dev/null | tail -1), $(
  "$build/bin/superoffload" version 2>/dev/null | head -1)"
[[ $clip == both ]] && clip=0,1.0
for c in ${clip//,/ }; do table "$c"; done
