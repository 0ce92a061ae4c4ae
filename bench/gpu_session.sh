#!/usr/bin/env bash
# One lent GPU session, every GPU figure in one command (#31). Runs on the lent machine (one
# H100/H200, 16 cores, its own PyTorch; no package index), from the working tree that the
# device tool copies there, with the build that bench/gpu_bundle.sh packed here:
#
#   env          GPU, driver, CUDA, NCCL, PyTorch, CPU: the facts every figure needs
#   trace        steps 3-4 traced with Kineto ([profile] trace_steps) in four runs: the 1.65B with the
#                optimizer on the device (the on-device baseline), SuperOffload at 1.65B with clip 0
#                and 1.0, and Llama-3.1-8B's shape with SuperOffload; each rank's summary (busy
#                fraction, top kernels, gaps, copies, synchronisations, allocator) comes back in
#                $OUT/trace/summaries.json (the multi-MB traces stay on the machine), each run's start-up
#                timeline in trace.txt
#   tests        every CTest test labelled gpu (commands as CTest lists them)
#   correctness  the tiny model's losses on the GPU against the CPU, reduce buckets of 20,000
#                elements (every layer in several chunks), fp32 and bf16, speculation always,
#                auto and never, gradient_clipping 0 and 1.0; a checkpoint written on the GPU
#                resumed on the CPU and the other way round
#   memory       Llama shapes of 1B, 3B and 8B (random init, bf16, activation checkpointing, seq
#                4096, micro-batch 4, ratio 0.85): the plan's device terms next to the measured
#                peaks (allocated and reserved); a run at the plan's limit + 10% refused, and
#                run anyway without the check to show it does not fit
#   moonshot     Llama-3.1-8B's shape on the one GPU with SuperOffload against the on-device
#                TFLOPS of a model that fits (3B, optimizer on the device), same seq and batch
#   baseline     that 3B alone, for a session that runs the moonshot without the memory part
#   speed        bench/offload_modes.sh at 1.65B, clipping 1.0, 0, then p90 (90% of steps unclipped, the
#                regime of fine-tuning from pretrained weights)
#   link         the host-device link: pinned/pageable copy rates, cudaHostRegister rate
#   profile      one 1.65B SuperOffload step profiled per layer and phase (CUDA events)
#   long         Llama-3.1-8B's shape at the longest row this GPU fits by plan (plan --max-seq with
#                activation offload and MLP tiles, capped at 128k tokens; #50): tokens/s, MFU, the
#                activation offload's copies, the plan against the peaks; the issue's long run
#   moe          bench_moe_layer on the GPU in bf16 (#49): one MoE layer's experts at Qwen3-30B-A3B's
#                and GPT-OSS-20B's shapes, 4,096 and 16,384 tokens, grouped against the per-expert
#                loop and a dense product of the same FLOPs (goals: 0.6 of dense, 3x the loop)
#   deepspeed    bench/deepspeed_compare/compare.sh at 1.65B, clipping 0 and 1.0, with DeepSpeed
#                from the wheels carried in .gpu/wheels (bench/gpu_bundle.sh makes them); not in
#                the default order (DeepSpeed compiles its CPU Adam first): a call of its own,
#                SO_SESSION_ORDER="deepspeed:500"; baseline likewise, when memory is not run
#
# Each part writes $OUT/<part>.txt and a line to $OUT/summary.txt, and the next part runs
# when one fails. Parts are cut to what is left before --deadline (seconds from the start).
# The default order is the first of a session's two calls: env, trace, tests. Between the
# calls the traces' findings are fixed on the CPU; the second call re-measures and compares,
# SO_SESSION_ORDER="trace:260,deepspeed:280"; the other parts are named the same way.
#
#   bench/gpu_session.sh [--out DIR] [--quick] [--deadline 560] [--parts env,tests,...]
#                        [--bundle .gpu/bundle.tar.xz] [--dry-run]
# --quick: about 3 minutes (the GPU tests, one correctness pair, the 1B memory row, the speed
# table at clip 1.0 with 2 timed steps). --dry-run: on any machine, print every step with its
# commands, check the script's own inputs (configs, model shapes, the bundle and what it
# holds) and exit 0; the test suite runs it (cli_gpu_session).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$here/runs/gpu_session} quick=0 dry=0 deadline=560 bundle=$here/.gpu/bundle.tar.xz
wheels_dir=$here/.gpu/wheels
parts=env,trace,tests,correctness,memory,baseline,moonshot,long,speed,link,profile,moe,deepspeed
while (($#)); do
  case $1 in
    --out) out=$2; shift ;; --quick) quick=1 ;; --dry-run) dry=1 ;; --deadline) deadline=$2; shift ;;
    --parts) parts=$2; shift ;; --bundle) bundle=$2; shift ;;
    -h|--help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_session.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
start=$SECONDS
left() { echo $((deadline - (SECONDS - start))); }
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

# ---- where the build sits -------------------------------------------------------------------------
# The programs find our libraries and LibTorch relative to themselves ($ORIGIN: build/lib, and
# the tree's .venv/lib/pythonX.Y/site-packages/torch/lib), so the tree runs wherever the device
# tool puts it; only the GPU tests' commands name the tree the bundle was built in, and are
# rewritten to this one.
built_root=$here
# A rehearsal of the plumbing on a machine without a GPU (not a measurement): SO_SESSION_DEVICE=cpu
# runs every "GPU" run on the CPU, SO_SESSION_SEQ and SO_SESSION_SHAPES ("1b:256x2 3b:384x2")
# shrink the memory part's models, SO_SESSION_SPEED_ARGS ("--hidden 256 --layers 2 --seq 128 --bf16 false")
# the speed part's.
gpu=${SO_SESSION_DEVICE:-cuda} seq=${SO_SESSION_SEQ:-4096}

# ---- dry run: the plan and the inputs -------------------------------------------------------------
if ((dry)); then
  bad=0
  check() { if eval "$2"; then echo "  ok       $1"; else echo "  MISSING  $1"; bad=1; fi; }
  echo "gpu_session.sh --dry-run: parts $parts, deadline ${deadline}s, quick $quick, results in $out"
  echo "inputs:"
  check "configs/tiny.toml" "[[ -f $here/configs/tiny.toml ]]"
  check "configs/models/tiny-llama (tokenizer for the scaled models)" "[[ -f $here/configs/models/tiny-llama/tokenizer.json ]]"
  check "configs/models/llama-3.1-8b/config.json (the moonshot's shape)" \
    "grep -q '\"hidden_size\": 4096' $here/configs/models/llama-3.1-8b/config.json"
  check "bench/offload_modes.sh and bench/scaled_llama.sh" "[[ -x $here/bench/offload_modes.sh && -f $here/bench/scaled_llama.sh ]]"
  check "tests/gpu/test_copy_lag.sh, test_train_cuda.sh" "[[ -f $here/tests/gpu/test_copy_lag.sh && -f $here/tests/gpu/test_train_cuda.sh ]]"
  if [[ -f $bundle ]]; then
    listing=$(tar -tJf "$bundle" 2>/dev/null)
    echo "  ok       bundle $bundle ($(du -h "$bundle" | cut -f1))"
    for f in build/bin/superoffload build/bin/train_parity build/bin/offload_parity build/bin/test_gpu_devices \
      build/bin/test_gpu_attention build/bin/test_gpu_rms_norm build/lib/libd2h_lag.so build/gpu_tests.json build/torch_version.txt \
      usr/bin/orted usr/bin/mpirun lib/libmpi.so.40 lib/libhdf5_serial.so.103; do
      check "  bundle holds $f" "grep -qx './$f' <<<\"\$listing\""
    done
  else
    echo "  absent   bundle $bundle: make it here with bench/gpu_bundle.sh before the device call (not an error in a dry run)"
  fi
  for w in deepspeed hjson pydantic pydantic_core annotated_types typing_inspection; do
    if ls "$wheels_dir/$w"-*.whl > /dev/null 2>&1; then
      echo "  ok       wheel $(basename "$(ls "$wheels_dir/$w"-*.whl | head -1)")"
    else
      echo "  absent   wheel $w in $wheels_dir: bench/gpu_bundle.sh fetches it (the deepspeed part needs it; not an error in a dry run)"
    fi
  done
  echo "steps (each with a time limit, cut to what is left of the deadline):"
  cat <<EOF
  setup        unpack the bundle; .venv/<the build's site-packages path> -> the
               machine's PyTorch (same version as the build's, checked); Open MPI from the bundle (OPAL_PREFIX);
               superoffload version must say LibTorch's CUDA backend loaded (else the session stops)
  env          nvidia-smi; nvcc --version; python3 -c 'torch, torch.version.cuda, torch.cuda.nccl.version()'; lscpu
  trace        superoffload train (4 steps) --set profile.trace_steps=3-4: 1.65B (hidden 2560 x 24, seq 2048 x 4,
               bf16) with offload.device=none, with SuperOffload at clip 1.0 and 0; the 8B (seq 4096 x 4, ratio
               0.85, bf16 moments); traces/*.summary.json -> \$OUT/trace/summaries.json (one file)
  tests        for each test of build/gpu_tests.json (ctest -L gpu): its command and environment, skip/pass/fail
  correctness  superoffload train configs/tiny.toml --set runtime.device=cpu|cuda --set precision.bf16=false|true
                 --set offload.speculation=always|auto|never --set training.gradient_clipping=0|1.0
                 --set zero.reduce_bucket_size=20000 (10 steps); GPU vs CPU within 2e-3 (fp32) / 3e-2 (bf16);
               GPU step-5 checkpoint resumed on the CPU (--resume DIR) and the CPU's on the GPU
  memory       superoffload plan ... --gpus-per-node 1 --gpu-memory <measured>; superoffload train (3 steps) of
               1B (hidden 2048 x 16), 3B (3072 x 28), 8B (llama-3.1-8b) at seq 4096, micro-batch 4, bf16;
               /train/device_peak_bytes, device_reserved_peak_bytes vs the plan; the refused run and the forced one
  moonshot     the 8B row's TFLOPS/tokens/s against the 3B with offload.device=none (same seq, micro-batch)
  long         superoffload plan (the 8B, 1 row, activation offload, bf16 moments) --max-seq --gpu-memory <measured>
               --host-memory <MemTotal>; superoffload train (3 steps) at that row (<= 128k, a multiple of 8k)
  baseline     that 3B alone (SO_SESSION_ORDER=...,baseline:60,moonshot:170 without the memory part)
  speed        bench/offload_modes.sh --clip 1.0, 0, then p90 (1.65B: hidden 2560 x 24, seq 2048, micro 4)
  deepspeed    pip install --no-index --target /tmp/... .gpu/wheels/*.whl; bench/deepspeed_compare/compare.sh --clip both
               --hidden 2560 --layers 24 --python <machine python with those wheels> (SO_SESSION_DEEPSPEED_CLIP/ARGS)
  link         python3: pinned and pageable copies of 2 GiB each way; cudaHostRegister of 8 GiB
  moe          build/bin/bench_moe_layer --device cuda --dtype bf16 --tokens 4096,16384 --rounds 3
  profile      superoffload train (1.65B, seq 2048 x 4) --set profile.step=3: per layer and phase, CUDA events
EOF
  ((bad)) && { echo "gpu_session.sh --dry-run: inputs missing (above)" >&2; exit 1; }
  exit 0
fi

# ---- setup ------------------------------------------------------------------------------------------
[[ -f $bundle ]] || { note "setup: FAILED: no bundle at $bundle (make it with bench/gpu_bundle.sh)"; exit 1; }
cd "$built_root" || exit 1
root=/tmp/so-gpu-root
rm -rf "$root" && mkdir -p "$root" && tar -C "$root" -xJf "$bundle" ||
  { note "setup: FAILED: could not unpack $bundle"; exit 1; }
tests_json=$root/gpu_tests.json
# The tests' commands and environment name the tree the bundle was built in: this one instead.
bundle_root=$(cat "$root/build/built_root.txt" 2>/dev/null || echo /work/main)
sed -E "s#$bundle_root([/\"])#$here\1#g" "$root/build/gpu_tests.json" > "$tests_json"
# Where the build's RUNPATHs look for LibTorch, relative to the tree (.venv/lib/python3.11/site-packages).
torch_site_in_tree=$(cat "$root/build/torch_site.txt" 2>/dev/null || echo .venv/lib/python3.11/site-packages)
want_torch=$(cat "$root/build/torch_version.txt")
# A build made in this tree (a trial of this script beside the build) is used as it is.
[[ -f build/CMakeCache.txt ]] || { rm -rf build && mv "$root/build" build; }
machine_python=$(command -v python3)
machine_site=$("$machine_python" -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
if [[ ! -e .venv ]]; then
  mkdir -p .venv/bin "$(dirname "$torch_site_in_tree")"
  ln -s "$machine_site" "$torch_site_in_tree"
  # The tests' Python (h5py, numpy) is the machine's, without the bundle's libraries.
  printf '#!/bin/sh\nunset LD_LIBRARY_PATH\nexec %s "$@"\n' "$machine_python" > .venv/bin/python
  chmod +x .venv/bin/python
fi
have_torch=$("$machine_python" -c 'import torch; print(torch.__version__)')
export OPAL_PREFIX=$root/usr PMIX_PREFIX=$root/usr/lib/x86_64-linux-gnu/pmix2
# The CUDA runtime and NCCL of the machine's PyTorch, where /usr/local/cuda lacks them.
cuda_dirs=$(find "$machine_site/nvidia" \( -name 'libcudart.so.1*' -o -name 'libnccl.so.2*' \) -printf '%h\n' 2>/dev/null |
  sort -u | paste -sd:)
export PATH=$root/usr/bin:$PATH LD_LIBRARY_PATH=$root/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_mca_base_component_show_load_errors=0 PMIX_MCA_pcompress_base_silence_warning=1
[[ -f build/CMakeCache.txt ]] && ctest --test-dir build -L gpu --show-only=json-v1 > "$tests_json"
bin=$built_root/build/bin/superoffload
if ! "$bin" version > "$out/setup.txt" 2>&1; then
  note "setup: FAILED: build/bin/superoffload does not start here (PyTorch $have_torch, built against $want_torch):"
  tail -5 "$out/setup.txt" | tee -a "$summary"
  ldd "$bin" | grep -i "not found" | tee -a "$summary"; exit 1
fi
# The program opens LibTorch's CUDA backend at start where the driver loads
# (src/model/torch_cuda_backend.hpp): without it every part would fail, each in its own way.
if ! grep -q "LibTorch's CUDA backend loaded" "$out/setup.txt"; then
  note "setup: FAILED: LibTorch's CUDA backend did not load: $(grep -m1 '^CUDA' "$out/setup.txt")"; exit 1
fi
note "setup: ok in $((SECONDS - start)) s; PyTorch here $have_torch, build's $want_torch"

# run_part NAME BUDGET: runs part_NAME with its output in $OUT/NAME.txt, cut to the deadline.
run_part() {
  local name=$1 budget=$2 t0=$SECONDS
  [[ ,$parts, == *,$name,* ]] || return 0
  local room=$(($(left) - 10))
  if ((room < 20)); then note "$name: SKIPPED: ${room}s left before the deadline"; return 0; fi
  ((budget > room)) && budget=$room
  part_deadline=$((SECONDS + budget))
  if ( "part_$name" ) > "$out/$name.txt" 2>&1; then
    note "$name: ok in $((SECONDS - t0)) s"
  else
    note "$name: FAILED or cut ($((SECONDS - t0)) s of ${budget}): see $name.txt"
  fi
  grep '^RESULT' "$out/$name.txt" | sed 's/^RESULT /  /' | tee -a "$summary"
}
part_left() { echo $((part_deadline - SECONDS)); }
# within SECONDS CMD...: a step with a limit, never past its part's deadline.
within() {
  local limit=$1
  shift
  local room=$(($(part_left) - 2))
  ((limit > room)) && limit=$room
  ((limit < 5)) && { echo "cut: no time left for: $*"; return 124; }
  timeout --kill-after=10 "$limit" "$@"
}

part_env() {
  nvidia-smi
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  nvcc --version 2>/dev/null | tail -2
  "$machine_python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpu", torch.cuda.get_device_name(0))'
  "$machine_python" --version
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|NUMA node'
  free -g | head -2
  uname -r
  "$bin" version
  echo "RESULT $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader); torch $have_torch; $(lscpu | sed -nE 's/^Model name: *//p')"
}

part_tests() {
  "$machine_python" - "$tests_json" "$root/usr/bin/mpiexec" "$(part_left)" <<'PY'
import json, os, subprocess, sys, time
tests = json.load(open(sys.argv[1]))["tests"]
# Those never run on a GPU before first, when the time is short.
first = ["gpu_copy_lag", "gpu_offload_speculation", "gpu_train_tiny"]
tests.sort(key=lambda t: first.index(t["name"]) if t["name"] in first else len(first))
mpiexec, budget = sys.argv[2], float(sys.argv[3])
deadline = time.time() + budget - 5
failed = 0
for t in tests:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    env = dict(os.environ)
    for kv in props.get("ENVIRONMENT", []):
        k, _, v = kv.partition("=")
        env[k] = v.replace("/usr/bin/mpiexec", mpiexec)
    env["MPIEXEC"] = mpiexec
    cmd = [mpiexec if c == "/usr/bin/mpiexec" else c for c in t["command"]]
    left = deadline - time.time()
    if left < 10:
        print(f"RESULT {t['name']}: NOT RUN (deadline)"); failed += 1; continue
    t0 = time.time()
    try:
        cwd = props.get("WORKING_DIRECTORY")
        if cwd: os.makedirs(cwd, exist_ok=True)
        p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                           timeout=min(left, float(props.get("TIMEOUT", 600))))
        text, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
    skipped = rc == 77 or "[  SKIPPED ]" in text or "SKIPPED:" in text
    verdict = "skipped" if skipped else "passed" if rc == 0 else f"FAILED ({rc})"
    failed += verdict.startswith("FAILED")
    print(f"===== {t['name']}: {verdict} in {time.time() - t0:.1f} s\n{text[-6000:]}")
    print(f"RESULT {t['name']}: {verdict} ({time.time() - t0:.0f} s)", flush=True)
sys.exit(1 if failed else 0)
PY
}

corpus=/tmp/so-corpus.jsonl
tiny_run() {  # tiny_run NAME DEVICE [--set ...]: 10 steps of the tiny model
  local name=$1 device=$2
  shift 2
  within 90 mpirun -np 1 --bind-to none "$bin" train configs/tiny.toml --set training.output_dir="$work/$name" \
    --set data.path="$corpus" --set data.seq_len=64 --set training.max_steps=10 --set checkpoint.every_steps=5 \
    --set checkpoint.save_on_exit=false --set zero.reduce_bucket_size=20000 --set runtime.device="$device" "$@" \
    > "$work/$name.log" 2>&1
}
losses() { sed -nE 's/.*Step ([0-9]+)\/[0-9]+ \| Loss ([0-9.e+-]+).*/\1 \2/p' "$1"; }
# pair A.log B.log: "step lossA lossB" for the steps both logged
pair() { awk 'NR == FNR { a[$1] = $2; next } $1 in a { print $1, a[$1], $2 }' <(losses "$1") <(losses "$2"); }
# compare A.log B.log TOL LABEL: worst relative loss difference, RESULT line, status
compare() {
  pair "$1" "$2" | awk -v tol="$3" -v label="$4" '
    { n++; rel = ($2 - $3) / $2; if (rel < 0) rel = -rel; if (rel > worst) worst = rel }
    END { ok = n >= 10 && worst < tol; printf "RESULT %s: %d steps, worst relative difference %.2e (limit %g) %s\n",
          label, n, worst, tol, ok ? "ok" : "FAILED"; exit !ok }'
}

part_correctness() {
  work=$(mktemp -d)
  "$built_root/build/bin/superoffload_demo_corpus" "$corpus" --tokens 100000 > /dev/null
  local status=0 precisions=(false true) clips=(1.0 0) specs=(always auto never) n=$(nproc)
  local upper_half=$((n / 2))-$((n - 1))
  ((n < 4)) && upper_half=0-$((n - 1))
  ((quick)) && precisions=(false) clips=(1.0) specs=(auto)
  for bf16 in "${precisions[@]}"; do
    for clip in "${clips[@]}"; do
      # The CPU reference runs beside the GPU runs (its own cores: the GPU runs need few).
      taskset -c "$upper_half" bash -c "$(declare -f within part_left tiny_run); part_deadline=$part_deadline bin=$bin work=$work corpus=$corpus \
        tiny_run cpu_bf16${bf16}_clip$clip cpu --set precision.bf16=$bf16 --set training.gradient_clipping=$clip \
        --set runtime.bind=none" &
      local ref=$!
      for spec in "${specs[@]}"; do
        local set_spec=(--set offload.speculation=$spec)
        [[ $spec == never ]] && set_spec=(--set offload.super_offload=false)
        tiny_run "gpu_bf16${bf16}_clip${clip}_$spec" "$gpu" --set precision.bf16=$bf16 \
          --set training.gradient_clipping=$clip "${set_spec[@]}" || { echo "GPU run failed:"; tail -20 "$work/gpu_bf16${bf16}_clip${clip}_$spec.log"; status=1; }
      done
      wait $ref || { echo "CPU run failed:"; tail -20 "$work/cpu_bf16${bf16}_clip$clip.log"; status=1; }
      local tol=2e-3
      [[ $bf16 == true ]] && tol=3e-2
      for spec in "${specs[@]}"; do
        compare "$work/cpu_bf16${bf16}_clip$clip.log" "$work/gpu_bf16${bf16}_clip${clip}_$spec.log" $tol \
          "bf16 $bf16 clip $clip speculation $spec: GPU vs CPU" || status=1
      done
    done
  done
  grep -h "time breakdown" "$work"/gpu_bf16false_clip1.0_auto.log | tail -1
  # Checkpoint portability: the GPU's step-5 checkpoint resumed on the CPU, the CPU's on the GPU;
  # steps 6-10 must follow the uninterrupted run of the resuming device.
  local gpu_run=$work/gpu_bf16false_clip1.0_auto cpu_run=$work/cpu_bf16false_clip1.0
  for pair in "gpu cpu $gpu_run" "cpu $gpu $cpu_run"; do
    set -- $pair
    local from=$1 to=$2 dir=$3
    [[ -d $dir/checkpoints/step_00000005 ]] || { echo "RESULT checkpoint from $from: no step-5 checkpoint"; status=1; continue; }
    within 90 mpirun -np 1 --bind-to none "$bin" train configs/tiny.toml --set training.output_dir="$work/resumed_from_$from" \
      --set data.path="$corpus" --set data.seq_len=64 --set training.max_steps=10 --set checkpoint.every_steps=0 \
      --set checkpoint.save_on_exit=false --set zero.reduce_bucket_size=20000 --set runtime.device=$to \
      --set training.gradient_clipping=1.0 --set offload.speculation=auto --resume "$dir/checkpoints/step_00000005" \
      > "$work/resumed_from_$from.log" 2>&1 || { tail -20 "$work/resumed_from_$from.log"; status=1; }
    grep -h "resum" "$work/resumed_from_$from.log" | head -2
    local same=$gpu_run
    [[ $to == cpu ]] && same=$cpu_run
    pair "$same.log" "$work/resumed_from_$from.log" | awk -v label="checkpoint written on $from, resumed on $to" '
      { n++; rel = ($2 - $3) / $2; if (rel < 0) rel = -rel; if (rel > worst) worst = rel }
      END { ok = n == 5 && worst < 2e-3; printf "RESULT %s: steps 6-10 within %.2e of that device'"'"'s uninterrupted run %s\n",
            label, worst, ok ? "ok" : "FAILED"; exit !ok }' || status=1
  done
  rm -rf "$work"
  return $status
}

# llama_dir DIR SHAPE: a model directory with the demo tokenizer and the shape's config.json
llama_dir() {
  local dir=$1 shape=$2
  mkdir -p "$dir"
  cp configs/models/tiny-llama/* "$dir/"
  case $shape in
    8b) cp configs/models/llama-3.1-8b/config.json "$dir/" ;;
    *)  local hidden=${shape%x*} layers=${shape#*x}
        source bench/scaled_llama.sh
        scaled_llama "$dir" "$hidden" "$layers" "$seq" 1 "$built_root/build" ;;
  esac
}
gpu_gib=
measure_run() {  # measure_run NAME SHAPE LIMIT [--set ...]: plan + 3 steps, plan vs peaks
  local name=$1 shape=$2 limit=$3
  shift 3
  local dir=$work/$name
  llama_dir "$dir/model" "$shape"
  local common=(--set model.path="$dir/model" --set data.path="$corpus4k" --set data.seq_len=$seq
    --set training.train_micro_batch_size_per_gpu=4 --set runtime.device=$gpu --set precision.bf16=true --set training.activation_checkpointing=true
    --set offload.ratio=0.85 --set offload.optimizer_state_dtype=bf16 --set zero.sub_group_size=100000000
    --set zero.reduce_bucket_size=200000000 --set offload.cpuadam_cores_perc=0.9 "$@")
  echo "===== $name ($shape): plan"
  "$bin" plan configs/tiny.toml "${common[@]}" --gpus-per-node 1 --gpu-memory "$gpu_gib" 2>&1 | tee "$dir.plan"
  echo "===== $name: train"
  within "$limit" mpirun -np 1 --bind-to none "$bin" train configs/tiny.toml "${common[@]}" --set training.output_dir="$dir/out" \
    --set training.max_steps=100 --set training.timing_warmup_steps=1 --set training.bench_steps=2 \
    --set checkpoint.every_steps=0 --set checkpoint.save_on_exit=false --set metrics.wall_clock_breakdown=true \
    > "$dir.log" 2>&1
  local rc=$?
  grep -E "memory:|optimizer:|training |Step |time breakdown|summary|error|Error" "$dir.log" | cut -c1-400 | tail -25
  ((rc == 0)) || { echo "RESULT $name: train exited $rc"; tail -15 "$dir.log"; return 1; }
  "$machine_python" - "$dir/out/metrics.h5" "$name" "$dir.log" <<'PY'
import sys, re, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
name, log = sys.argv[2], open(sys.argv[3]).read()
alloc = float(np.nanmax(f["train/device_peak_bytes"][...]))
reserved = float(np.nanmax(f["train/device_reserved_peak_bytes"][...])) if "train/device_reserved_peak_bytes" in f else float("nan")
plan = float(f.attrs["planned_device_bytes"])
host = float(np.nanmax(f["ranks/host_peak_rss_bytes"][...])) if "ranks/host_peak_rss_bytes" in f else float("nan")
plan_host = float(f.attrs.get("planned_host_bytes", "nan"))
m = re.search(r"summary: .*", log)
g = 2**30
print(f"RESULT {name}: plan {plan/g:.2f} GiB (without runtime) vs peak allocated {alloc/g:.2f} GiB ({(plan/alloc-1)*100:+.1f}%), "
      f"reserved {reserved/g:.2f} GiB ({(plan/reserved-1)*100:+.1f}%); host plan {plan_host/g:.1f} GiB vs peak RSS {host/g:.1f} GiB")
if m: print(f"RESULT {name}: {m.group(0)[:300]}")
PY
}

# long_runs_setup: what measure_run needs: $work, the GPU's memory in GB ($gpu_gib, for plan)
# and a corpus long enough for a few steps at seq 4096 ($corpus4k).
long_runs_setup() {
  work=$(mktemp -d)
  gpu_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 |
    awk '{ printf "%.1f", $1 / 1024 * 1.073741824 }')
  gpu_gib=${gpu_gib:-141}
  corpus4k=$work/corpus.jsonl
  "$built_root/build/bin/superoffload_demo_corpus" "$corpus4k" --tokens 400000 > /dev/null
}

part_memory() {
  long_runs_setup
  local status=0 shapes=(1b:2048x16 3b:3072x28) s3b=3072x28
  ((quick)) && shapes=(1b:2048x16)
  [[ -n ${SO_SESSION_SHAPES:-} ]] && read -ra shapes <<<"$SO_SESSION_SHAPES" && s3b=${shapes[-1]#*:}
  for s in "${shapes[@]}"; do
    measure_run "llama_${s%%:*}" "${s#*:}" 120 || status=1
  done
  # The moonshot's baseline: the 3B with its optimizer on the device (fits whole), same seq/batch.
  if [[ ,$parts, == *,moonshot,* ]] && ((!quick)); then
    measure_run llama_3b_on_device "$s3b" 120 --set offload.device=none || status=1
    cp "$work/llama_3b_on_device.log" /tmp/so-on-device-baseline.log
  fi
  # Refusal: the 3B at the micro-batch whose plan first exceeds the GPU by about 10%.
  if ((!quick)) && (($(part_left) > 60)); then
    local dir=$work/refuse
    llama_dir "$dir/model" "$s3b"
    local mb
    for mb in $(seq 96 8 256); do
      "$bin" plan configs/tiny.toml --set model.path="$dir/model" --set data.seq_len=$seq --set precision.bf16=true \
        --set training.train_micro_batch_size_per_gpu=$mb --set offload.ratio=0.85 --gpus-per-node 1 --gpu-memory "$gpu_gib" \
        > "$dir.plan" 2>&1
      grep -q "does not fit" "$dir.plan" && break
    done
    cat "$dir.plan"
    # Rows for two steps at that micro-batch (the shared corpus holds about 100: at 136 the runs
    # stopped on the data, 2026-11-28, before the memory check could speak).
    "$built_root/build/bin/superoffload_demo_corpus" "$dir/corpus.jsonl" --tokens $(((mb * 2 + 8) * seq * 5 / 4)) > /dev/null
    local refuse=(mpirun -np 1 --bind-to none "$bin" train configs/tiny.toml --set model.path="$dir/model" --set data.path="$dir/corpus.jsonl"
      --set data.seq_len=$seq --set precision.bf16=true --set training.train_micro_batch_size_per_gpu=$mb --set runtime.device=$gpu --set offload.ratio=0.85
      --set training.max_steps=2 --set checkpoint.every_steps=0 --set checkpoint.save_on_exit=false --set training.output_dir="$dir/out")
    within 60 "${refuse[@]}" > "$dir.refused" 2>&1
    echo "RESULT refusal at micro-batch $mb: exit $?: $(grep -m1 -iE 'fatal|error|does not fit' "$dir.refused" | cut -c1-300)"
    grep -iE -A4 "does not fit|would fit|advice" "$dir.refused" | head -12
    within 90 "${refuse[@]}" --set runtime.check_memory=false > "$dir.forced" 2>&1
    echo "RESULT forced past the plan at micro-batch $mb: exit $?: $(grep -m1 -iE 'out of memory|fatal|error' "$dir.forced" | cut -c1-300)"
  fi
  rm -rf "$work"
  return $status
}
# The moonshot's baseline alone (when the memory part is not run): the 3B with its optimizer on
# the device, fitting whole, at the moonshot's seq and micro-batch.
part_baseline() {
  long_runs_setup
  local status=0
  measure_run llama_3b_on_device 3072x28 "$(($(part_left) - 5))" --set offload.device=none || status=1
  cp "$work/llama_3b_on_device.log" /tmp/so-on-device-baseline.log
  rm -rf "$work"
  return $status
}

# Long context (#50): the 8B's shape at the longest row the plan fits on this GPU and this
# machine's host memory with activation offload and MLP tiles (one row per micro-batch), capped
# at 128k tokens, rounded down to 8k; the run's tokens/s and MFU and its plan against the peaks.
part_long() {
  long_runs_setup
  local dir=$work/long host_gb longest row status=0
  host_gb=$(awk '/MemTotal/ { printf "%.0f", $2 * 1024 / 1e9 }' /proc/meminfo)
  llama_dir "$dir/model" 8b
  local sizes=(--set model.path="$dir/model" --set training.train_micro_batch_size_per_gpu=1
    --set training.gradient_accumulation_steps=1 --set training.train_batch_size=0 --set precision.bf16=true
    --set model.activation_offload=\"host\" --set offload.ratio=0.85 --set offload.optimizer_state_dtype=bf16)
  longest=$("$bin" plan configs/tiny.toml "${sizes[@]}" --gpus-per-node 1 --gpu-memory "$gpu_gib" --host-memory "$host_gb" \
    --max-seq 2>&1 | sed -nE 's/^longest sequence: ([0-9]+) tokens.*/\1/p')
  longest=${longest:-0}
  row=$((longest > 131072 ? 131072 : longest / 8192 * 8192))
  echo "RESULT long: the plan's longest row here (GPU ${gpu_gib} GiB, host ${host_gb} GB, offload + tiles): $longest tokens; running $row"
  ((row >= 8192)) || { rm -rf "$work"; return 1; }
  "$built_root/build/bin/superoffload_demo_corpus" "$work/long.jsonl" --tokens $((row * 5)) > /dev/null
  seq=$row corpus4k=$work/long.jsonl measure_run llama_8b_long 8b "$(($(part_left) - 5))" \
    --set model.activation_offload=\"host\" --set training.train_micro_batch_size_per_gpu=1 || status=1
  grep -E "activation offload|MLP tiles" "$work/llama_8b_long.log" | cut -c1-300 | sed 's/^/RESULT long: /'
  rm -rf "$work"
  return $status
}

# The moonshot: Llama-3.1-8B's shape on the one GPU with SuperOffload; its model TFLOPS against
# the on-device baseline of the memory or baseline part (the 3B with the optimizer on the
# device), when run. SO_SESSION_ALLOC_CONF: PYTORCH_CUDA_ALLOC_CONF for this run (for example
# expandable_segments:True, against the reserved-allocated gap).
part_moonshot() {
  long_runs_setup
  local status=0
  [[ -n ${SO_SESSION_ALLOC_CONF:-} ]] && export PYTORCH_CUDA_ALLOC_CONF=$SO_SESSION_ALLOC_CONF &&
    echo "RESULT moonshot with PYTORCH_CUDA_ALLOC_CONF=$PYTORCH_CUDA_ALLOC_CONF"
  measure_run llama_8b 8b "$(($(part_left) - 5))" || status=1
  "$machine_python" - "$work/llama_8b.log" /tmp/so-on-device-baseline.log <<'PY' || status=1
import sys, re, os
def tflops(path):
    if not os.path.exists(path): return None
    log = open(path).read().split("summary:")[-1]
    m = re.search(r"TFLOPS ([0-9.]+) per device \(model\), ([0-9.]+) per device \(hardware\)", log)
    t = re.search(r"([0-9]+) tokens/s", log)
    return (float(m.group(1)), float(m.group(2)), t.group(1)) if m and t else None
a, b = tflops(sys.argv[1]), tflops(sys.argv[2])
if a:
    print(f"RESULT moonshot: 8B SuperOffload {a[0]:.1f} model / {a[1]:.1f} hardware TFLOPS, {a[2]} tokens/s")
if a and b:
    print(f"RESULT moonshot: on-device baseline (3B, optimizer on the GPU) {b[0]:.1f} / {b[1]:.1f} TFLOPS, {b[2]} tokens/s; "
          f"ratio of model TFLOPS {a[0]/b[0]:.2f} (goal >= 0.9)")
sys.exit(0 if a else 1)
PY
  rm -rf "$work"
  return $status
}

# The host-device link: what pinned and pageable copies reach here, and how fast memory is
# pinned (cudaHostRegister), the ceilings of the offloaded optimizer's traffic.
part_link() {
  "$machine_python" - <<'PY'
import time, torch
n = 2 << 30
dev = torch.empty(n, dtype=torch.uint8, device="cuda")
def rate(label, fn, reps=3):
    fn(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps): fn()
    torch.cuda.synchronize()
    gbs = reps * n / (time.perf_counter() - t) / 1e9
    print(f"RESULT link {label}: {gbs:.1f} GB/s"); return gbs
pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
pageable = torch.empty(n, dtype=torch.uint8); pageable.fill_(1)
rate("d2h pinned", lambda: pinned.copy_(dev, non_blocking=True))
rate("h2d pinned", lambda: dev.copy_(pinned, non_blocking=True))
rate("d2h pageable", lambda: pageable.copy_(dev))
rate("h2d pageable", lambda: dev.copy_(pageable))
big = torch.empty(8 << 30, dtype=torch.uint8)
t = time.perf_counter()
rc = torch.cuda.cudart().cudaHostRegister(big.data_ptr(), big.numel(), 0)
dt = time.perf_counter() - t
print(f"RESULT link cudaHostRegister of 8 GiB (untouched pages): {dt:.2f} s ({8.59 / dt:.1f} GB/s), rc {rc}")
PY
}

# One SuperOffload step profiled per layer and phase with CUDA events ([profile] step), at 1.65B;
# then the same model in the ZeRO-Offload mode (every sub-group on the CPU, after backward). Every
# step's breakdown with its wall-clock accounting (what the phases leave untimed, and where).
part_profile() {
  work=$(mktemp -d)
  source bench/scaled_llama.sh
  scaled_llama "$work" 2560 24 2048 $((2048 * 4 * 10)) "$built_root/build"
  local rc=0 common=(--set model.path="$work" --set data.path="$work/corpus.jsonl" --set data.seq_len=2048
    --set training.train_micro_batch_size_per_gpu=4 --set precision.bf16=true --set checkpoint.every_steps=0
    --set checkpoint.save_on_exit=false --set training.timing_warmup_steps=2 --set training.bench_steps=2
    --set offload.cpuadam_cores_perc=0.9 --set metrics.wall_clock_breakdown=true --set runtime.device="$gpu")
  within 120 mpirun -np 1 --bind-to none "$bin" train configs/tiny.toml "${common[@]}" --set training.output_dir="$work/out" \
    --set profile.step=3 --set profile.top_layers=30 > "$work/log" 2>&1 || rc=1
  grep -vE "^\s*$" "$work/log" | grep -E "profile|layer|Step|breakdown|summary|ms|error|optimizer:" | cut -c1-900 | head -80
  grep -m1 "summary:" "$work/log" | sed 's/.*summary:/RESULT profiled 1.65B run:/' | cut -c1-300
  grep "wall:" "$work/log" | tail -1 | sed 's/.*wall:/RESULT auto clip 1.0, last step wall:/'
  echo "===== ZeRO-Offload mode (super_offload false, ratio 1.0)"
  within 90 mpirun -np 1 --bind-to none "$bin" train configs/tiny.toml "${common[@]}" --set training.output_dir="$work/out_zo" \
    --set offload.super_offload=false --set offload.ratio=1.0 > "$work/log_zo" 2>&1 || rc=1
  grep -E "Step|breakdown|summary|error|optimizer:" "$work/log_zo" | cut -c1-900 | head -30
  grep "wall:" "$work/log_zo" | tail -1 | sed 's/.*wall:/RESULT ZeRO-Offload mode, last step wall:/'
  rm -rf "$work"
  return $rc
}

# Steps 3-4 of four runs traced with Kineto ([profile] trace_steps), the first thing the GPU
# minutes buy: where each step's time goes. Only the summaries come back, all in one file
# ($OUT/trace/summaries.json: the device tool brings back at most 8 files, and the 8B's summary
# was the ninth), with the log's summary block and RESULT lines. SO_SESSION_TRACE_MODEL ("2560 24 2048") and
# SO_SESSION_TRACE_8B ("8b", or "HIDDENxLAYERS") shrink the models for a rehearsal on the CPU.
part_trace() {
  work=$(mktemp -d)
  mkdir -p "$out/trace"
  source bench/scaled_llama.sh
  local hidden layers seq165 status=0
  read -r hidden layers seq165 <<<"${SO_SESSION_TRACE_MODEL:-2560 24 2048}"
  scaled_llama "$work/m165" "$hidden" "$layers" "$seq165" $((seq165 * 4 * 6)) "$built_root/build"
  local shape8b=${SO_SESSION_TRACE_8B:-8b}
  llama_dir "$work/m8b" "$shape8b"
  "$built_root/build/bin/superoffload_demo_corpus" "$work/m8b/corpus.jsonl" --tokens $((seq * 4 * 6)) > /dev/null
  local common=(--set precision.bf16=true --set training.train_micro_batch_size_per_gpu=4 --set training.max_steps=4
    --set profile.trace_steps=3-4 --set checkpoint.every_steps=0 --set checkpoint.save_on_exit=false
    --set offload.cpuadam_cores_perc=0.9 --set runtime.device="$gpu")
  trace_run() {  # trace_run NAME MODEL_DIR SEQ LIMIT [--set ...]
    local name=$1 model=$2 run_seq=$3 limit=$4
    shift 4
    echo "===== $name"
    within "$limit" mpirun -np 1 --bind-to none "$bin" train configs/tiny.toml "${common[@]}" --set model.path="$model" \
      --set data.path="$model/corpus.jsonl" --set data.seq_len="$run_seq" --set training.output_dir="$work/$name" "$@" \
      > "$work/$name.log" 2>&1
    local rc=$?
    # The start-up timeline (#52) and the trace's summary block, with the steps after it.
    sed -n '/start-up: /,/^  all /p' "$work/$name.log" | cut -c1-200
    sed -n '/start-up: /s/.*start-up: \([0-9.]*\) s.*/RESULT trace '"$name"': start-up to the end of step 1 \1 s/p' "$work/$name.log"
    sed -n '/trace of rank 0 in/,$p' "$work/$name.log" | cut -c1-400 | head -70
    grep -E "error|Error" "$work/$name.log" | head -5
    mkdir -p "$work/summaries"
    for f in "$work/$name"/traces/*.summary.json; do
      [[ -f $f ]] && cp "$f" "$work/summaries/$name.$(basename "$f" | sed -E 's/\.steps_[0-9-]+\.summary\.json$//').json"
    done
    ((rc == 0)) || { echo "RESULT trace $name: train exited $rc"; tail -15 "$work/$name.log"; return 1; }
    "$machine_python" - "$work/summaries/$name.rank_0.json" "$name" <<'PY'
import json, sys
s, name = json.load(open(sys.argv[1])), sys.argv[2]
if "error" in s:
    print(f"RESULT trace {name}: {s['error']}"); sys.exit(1)
steps = s["steps"]
top = s["kernels"]["top"][:3]
copies = ", ".join(f"{c['direction']} {c['memory']} {c['bytes']/1e9:.2f} GB at {c['gb_per_s']:.1f} GB/s" for c in s["copies"])
a = s.get("allocator", {})
print(f"RESULT trace {name}: {1000*s['seconds']/len(steps):.0f} ms/step, device busy {100*s['busy_fraction']:.1f}%, "
      f"{s['gaps']['count']} gaps over 0.5 ms ({1000*s['gaps']['seconds']/len(steps):.0f} ms/step), "
      f"{s['syncs']['per_step']:.1f} syncs/step; allocator retries {a.get('retries','-')}, cudaMalloc {a.get('device_allocs','-')}")
print(f"RESULT trace {name}: top kernels " + "; ".join(f"{100*k['share']:.0f}% {k['name'][:60]}" for k in top))
print(f"RESULT trace {name}: by class " + ", ".join(f"{c['class']} {100*c['share']:.1f}%" for c in s["kernels"].get("classes", [])))
print(f"RESULT trace {name}: copies {copies or 'none'}")
for g in s["gaps"]["listed"][:3]:
    print(f"RESULT trace {name}: gap {g['ms']:.1f} ms in {g['scope'] or '-'} after {g['preceded_by']}")
for src in s["syncs"]["sources"][:3]:
    print(f"RESULT trace {name}: {src['count']} syncs from {src['where']}")
# What launched the largest kernels that are not matrix products or attention: what to fuse.
for k in [k for k in s["kernels"]["top"] if not any(w in k["name"] for w in ("nvjet", "gemm", "sdpa", "flash"))][:6]:
    by = "; ".join(f"{100*b['share']:.0f}% {b['by']}" for b in k.get("launched_by", []))
    print(f"RESULT trace {name}: {100*k['share']:.1f}% {k['calls']} calls {k['name'][:70]}" + (f" <- {by}" if by else ""))
PY
  }
  # SO_SESSION_TRACE_RUNS: which of the four (default all; "8b" is the last and takes what is left).
  local runs=" ${SO_SESSION_TRACE_RUNS:-on_device clip1 clip0 8b} "
  [[ $runs == *" on_device "* ]] && { trace_run on_device_1.65b "$work/m165" "$seq165" 60 --set offload.device=none || status=1; }
  [[ $runs == *" clip1 "* ]] && { trace_run superoffload_1.65b_clip1 "$work/m165" "$seq165" 60 --set training.gradient_clipping=1.0 || status=1; }
  [[ $runs == *" clip0 "* ]] && { trace_run superoffload_1.65b_clip0 "$work/m165" "$seq165" 60 --set training.gradient_clipping=0 || status=1; }
  [[ $runs == *" 8b "* ]] && { trace_run superoffload_8b "$work/m8b" "$seq" "$(($(part_left) - 5))" --set training.gradient_clipping=1.0 \
    --set offload.ratio=0.85 --set offload.optimizer_state_dtype=bf16 --set zero.sub_group_size=100000000 \
    --set zero.reduce_bucket_size=200000000 || status=1; }
  # RoPE's two formulations (HF's, and ours since these traces) on this device: seconds.
  "$machine_python" bench/rotary_formulations.py --device "$gpu" --rounds 9 2>&1 | sed 's/^summary: /RESULT trace /'
  # q/k/v and gate/up as one product each (off by default: 0.95x on an H100, 2026-11-28)
  # against separate products: one 8B-shaped block, bf16, forward and backward.
  within 60 "$built_root/build/bin/bench_fused_projections" --device "$gpu" --dtype bf16 --shapes llama-3.1-8b \
    --tokens 4096,8192 --rounds 5 2>&1 | sed -n 's/^summary: /RESULT trace /p'
  # SwiGLU's CUDA kernels against autograd's chain, and grouped kv heads given to SDPA as they are
  # against repeated (both on by default since 2026-11-28, unmeasured on a GPU before): the same block.
  for compare in swiglu gqa; do
    within 60 "$built_root/build/bin/bench_fused_projections" --compare "$compare" --device "$gpu" --dtype bf16 \
      --shapes llama-3.1-8b --tokens 4096,8192 --rounds 5 2>&1 | sed -n 's/^summary: /RESULT trace /p'
  done
  # Every rank's summary of every run in one file, keyed "<run>.rank_<R>".
  "$machine_python" - "$work/summaries" "$out/trace/summaries.json" <<'PY'
import json, pathlib, sys
files = sorted(pathlib.Path(sys.argv[1]).glob("*.json")) if pathlib.Path(sys.argv[1]).is_dir() else []
json.dump({f.stem: json.load(open(f)) for f in files}, open(sys.argv[2], "w"))
print(f"trace: {len(files)} summaries in {sys.argv[2]}")
PY
  rm -rf "$work"
  return $status
}

# The MoE layer's experts on the GPU (#49): grouped products against the per-expert loop and a
# dense product of the same active FLOPs, bf16.
part_moe() {
  within "$(($(part_left) - 5))" "$built_root/build/bin/bench_moe_layer" --device "$gpu" --dtype bf16 \
    --tokens "${SO_SESSION_MOE_TOKENS:-4096,16384}" --rounds 3 --shapes "${SO_SESSION_MOE_SHAPES:-qwen3,gpt-oss}" |
    tee /tmp/so-moe.log
  local rc=${PIPESTATUS[0]}
  sed -n 's/^summary: /RESULT moe /p' /tmp/so-moe.log
  return "$rc"
}

# DeepSpeed 0.19 (ZeRO-3 + super_offload, and its ZeRO-Offload mode) against ours on the speed
# part's model, from the wheels that bench/gpu_bundle.sh put in .gpu/wheels (installed into
# /tmp, never into the machine's Python). Its CPU Adam is compiled on first use (about a minute).
part_deepspeed() {
  local site=/tmp/so-deepspeed-site py=/tmp/so-deepspeed-python
  ls "$wheels_dir"/deepspeed-*.whl > /dev/null 2>&1 || { echo "RESULT deepspeed: no wheels in $wheels_dir (bench/gpu_bundle.sh)"; return 1; }
  rm -rf "$site"
  "$machine_python" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels_dir"/*.whl ||
    { echo "RESULT deepspeed: the wheels did not install"; return 1; }
  printf '#!/bin/sh\nunset LD_LIBRARY_PATH\nexport PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH}\nexec %s "$@"\n' "$site" "$machine_python" > "$py"
  chmod +x "$py"
  "$py" -c 'import deepspeed, transformers; print("deepspeed", deepspeed.__version__, "transformers", transformers.__version__)' ||
    { echo "RESULT deepspeed: does not import"; return 1; }
  within "$(($(part_left) - 5))" bash bench/deepspeed_compare/compare.sh --python "$py" --build "$built_root/build" \
    --clip "${SO_SESSION_DEEPSPEED_CLIP:-both}" --steps "${SO_SESSION_SPEED_STEPS:-4}" ${SO_SESSION_DEEPSPEED_ARGS:---hidden 2560 --layers 24} \
    > /tmp/so-deepspeed.log 2>&1
  local rc=$?
  cat /tmp/so-deepspeed.log
  grep -E "^model:|^  (superoffload|zero-offload) " /tmp/so-deepspeed.log | sed 's/^ */RESULT /'
  return $rc
}

part_speed() {
  local status=0 clips=(1.0 0 p90) steps=${SO_SESSION_SPEED_STEPS:-4}
  ((quick)) && clips=(1.0) steps=2
  for clip in "${clips[@]}"; do
    within "$(($(part_left) - 5))" bash bench/offload_modes.sh --clip "$clip" --steps $steps --build "$built_root/build" ${SO_SESSION_SPEED_ARGS:-} \
      > "/tmp/so-speed-clip$clip.log" 2>&1 || status=1
    cat "/tmp/so-speed-clip$clip.log"
    grep -E "ms/step|^model|steps clipped|90th percentile" "/tmp/so-speed-clip$clip.log" | sed 's/^ */RESULT /'
    rm -f "/tmp/so-speed-clip$clip.log"
  done
  return $status
}

run_part env 30
if [[ -n ${SO_SESSION_ORDER:-} ]]; then  # the second call, or a session's own choice
  for p in ${SO_SESSION_ORDER//,/ }; do run_part "${p%:*}" "${p#*:}"; done
elif ((quick)); then
  run_part trace 120; run_part tests 100; run_part correctness 40
else
  # The first call: traces first, then the GPU tests; what time is left goes to the rest.
  run_part trace 300; run_part tests 150; run_part moe 60; run_part correctness 100; run_part memory 150
  run_part moonshot 200; run_part long 150; run_part profile 60; run_part speed 200
fi
note "session: $((SECONDS - start)) s"
