#!/usr/bin/env bash
# The whole program built for aarch64 (scripts/setup --target aarch64, build-aarch64/) run under
# qemu-aarch64 on this x86 host, against the native build (label arm):
#  1. version names the emulated Grace code paths: the AdamW kernel on SVE2 with 128-bit vectors
#     (Grace's length), NEON when SVE is off, the checkpoint CRC32C on Arm's instructions;
#  2. plugins: the three shipped plugins load (their ABI tag equals the program's, as on x86);
#  3. config and plan print what the x86 build prints;
#  4. train on a 2-layer tiny Llama at 1 and at 2 ranks (mpirun starting qemu-aarch64 per rank):
#     every step's loss equals the x86 run's to 1e-5 relative (fp32; the kernels differ, so
#     not bitwise);
#  5. checkpoints are portable: one written on aarch64 verifies (inspect) and resumes on x86,
#     one written on x86 resumes on aarch64, and both continue as the uninterrupted x86 run.
# SO_ARM_QUICK=1 does 1 (SVE2 only), 2 and 4 at 1 rank only (the default CI run; the rest is
# ctest -L arm).
# Skipped, saying why, without an aarch64 build.
source "$(dirname "$0")/../cli/lib.sh"
cd "$SO_SOURCE_DIR"

arm_build="${SO_ARM_BUILD:-$SO_SOURCE_DIR/build-aarch64}"
if [[ ! -x $arm_build/bin/superoffload || ! -d $arm_build/sysroot ]]; then
  echo "SKIPPED: no aarch64 build in $arm_build (make it with: scripts/setup --target aarch64)"
  exit 0
fi
command -v qemu-aarch64 > /dev/null || { echo "SKIPPED: qemu-aarch64 is not installed (scripts/setup installs it)"; exit 0; }
quick=${SO_ARM_QUICK:-0}
# Grace: Neoverse V2, SVE2 with 128-bit vectors.
qemu=(qemu-aarch64 -L "$arm_build/sysroot" -cpu max,sve-default-vector-length=16)
arm=("${qemu[@]}" "$arm_build/bin/superoffload")
export OMP_NUM_THREADS=1

# ---- 1. the code paths ---------------------------------------------------------------------------
out=$("${arm[@]}" version 2>&1) || fail "version under qemu: $out"
cpu=$(grep '^CPU ' <<< "$out")
expect_contains "$cpu" "aarch64, emulated on" "the architecture, and that it is emulated"
expect_contains "$cpu" "AdamW kernel SVE2_128" "the optimizer on SVE2 with Grace's vector length"
expect_contains "$cpu" "checkpoint CRC32C a fused copy with Arm CRC32C instructions" "CRC32C on Arm instructions"
expect_contains "$out" "LibTorch    2." "LibTorch for aarch64 loaded"
if [[ $quick != 1 ]]; then
  neon=$(qemu-aarch64 -L "$arm_build/sysroot" -cpu max,sve=off "$arm_build/bin/superoffload" version 2>&1) \
    || fail "version without SVE: $neon"
  expect_contains "$(grep '^CPU ' <<< "$neon")" "AdamW kernel NEON" "NEON when the CPU has no SVE"
fi
echo "$cpu"

# ---- 2. plugins ---------------------------------------------------------------------------------
out=$("${arm[@]}" plugins 2>&1) || fail "plugins under qemu: $out"
# The default run builds the llama plugin only (scripts/test); scripts/setup --target aarch64 all three.
plugins_expected=3
[[ $quick == 1 ]] && plugins_expected=$(find "$arm_build/lib/superoffload/plugins" -name '*.so' | wc -l)
[[ $(grep -c '^ok .*libsuperoffload_llama.so' <<< "$out") == 1 ]] || fail "the llama plugin must load: $out"
[[ $(grep -c '^ok ' <<< "$out") == "$plugins_expected" && $out != *refused* ]] \
  || fail "$plugins_expected plugins must load: $out"
for plugin in "$arm_build"/lib/superoffload/plugins/*.so; do
  file -L "$plugin" | grep -q 'ARM aarch64' || fail "$plugin is not an aarch64 library"
done
# Loaded ("ok") means each plugin's tag equals the program's; the headers are the same on both
# architectures, and so is the tag.
arm_tag=$(grep -o 'ABI tag [0-9a-f]*' <<< "$out")
x86_tag=$("$SO_BIN" plugins 2>&1 | grep -o 'ABI tag [0-9a-f]*')
[[ -n $arm_tag && $arm_tag == "$x86_tag" ]] || fail "plugin ABI tags: aarch64 '$arm_tag', x86 '$x86_tag'"

# ---- the model and data both builds train on ------------------------------------------------------
mkdir -p "$tmp/model"
cp configs/models/tiny-llama/* "$tmp/model/"
# 2 layers of width 64: emulated floating point runs at about 1 GFLOP/s, so the 6-layer,
# 384-wide tiny model takes ~20 s a step under qemu; this one well under a second.
"$SO_PYTHON" - "$tmp/model/config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config.update(num_hidden_layers=2, hidden_size=64, intermediate_size=176, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16)
json.dump(config, open(sys.argv[1], "w"), indent=2)
PY
"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
# run <x86|arm> RANKS OUTPUT_DIR [--set ...]
run() {
  local where=$1 ranks=$2 output=$3
  shift 3
  local program=("$SO_BIN")
  [[ $where == arm ]] && program=("${arm[@]}")
  local launch=()
  ((ranks > 1)) && launch=("$MPIEXEC" -np "$ranks" --oversubscribe)
  "${launch[@]}" "${program[@]}" train configs/tiny.toml --set model.path="$tmp/model" \
    --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32 --set training.train_batch_size=4 \
    --set training.train_micro_batch_size_per_gpu=0 --set training.max_steps=6 --set checkpoint.every_steps=3 \
    --set metrics.flush_every_steps=1 --set training.output_dir="$output" "$@" > "$output.log" 2>&1
}
# same_losses A B [FROM]: metrics.h5 of two runs, every step's loss (from step FROM) to 1e-5 relative.
same_losses() {
  "$SO_PYTHON" - "$1/metrics.h5" "$2/metrics.h5" "${3:-1}" <<'PY' || fail "losses differ: $1 vs $2"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
first = int(sys.argv[3])
def series(f):
    steps, loss = f["train/step"][...], f["train/loss"][...]
    return {int(s): float(l) for s, l in zip(steps, loss) if s >= first}
x, y = series(a), series(b)
assert x.keys() == y.keys() and x, (sorted(x), sorted(y))
worst = max(abs(x[s] - y[s]) / abs(x[s]) for s in x)
print(f"  steps {min(x)}-{max(x)}: largest relative difference {worst:.2e}")
assert worst <= 1e-5, {s: (x[s], y[s]) for s in x}
PY
}

# ---- 4. train, 1 rank (and 2) ----------------------------------------------------------------------
run x86 1 "$tmp/x86_1" || fail "x86 run: $(tail -20 "$tmp/x86_1.log")"
run arm 1 "$tmp/arm_1" || fail "aarch64 run under qemu: $(tail -20 "$tmp/arm_1.log")"
expect_contains "$(cat "$tmp/arm_1.log")" "Step 6/6" "the aarch64 run trained to step 6"
same_losses "$tmp/x86_1" "$tmp/arm_1"
if [[ $quick == 1 ]]; then
  echo "aarch64 under qemu (quick): version, plugins, 1-rank training: ok"
  exit 0
fi
run x86 2 "$tmp/x86_2" || fail "x86 run, 2 ranks: $(tail -20 "$tmp/x86_2.log")"
run arm 2 "$tmp/arm_2" || fail "aarch64 run under qemu, 2 ranks: $(tail -20 "$tmp/arm_2.log")"
same_losses "$tmp/x86_2" "$tmp/arm_2"

# ---- 3. config and plan: the same text ----------------------------------------------------------
# The plan of a 70B job on two 4xGH200 nodes, and its binding on the recorded 4xGH200 topology
# (hwloc reading the XML on aarch64).
for args in "config configs/tiny.toml" "config --reference" \
    "plan configs/reference-models/llama-3.3-70b.toml --nodes 2 --gpus-per-node 4" \
    "plan configs/reference-models/llama-3.3-70b.toml --gpus-per-node 4 --topology tests/cluster/topologies/gh200x4.xml"; do
  # shellcheck disable=SC2086
  "$SO_BIN" $args > "$tmp/x86.txt" 2>&1 || fail "x86: $args: $(tail "$tmp/x86.txt")"
  # shellcheck disable=SC2086
  "${arm[@]}" $args > "$tmp/arm.txt" 2>&1 || fail "aarch64: $args: $(tail "$tmp/arm.txt")"
  # The host plan's "program and libraries" term is measured from the running program, whose
  # libraries differ in size between the builds: its two lines (per rank, per node) are left out.
  sed -i '/program and libraries/d; /^per node, host:/d' "$tmp/x86.txt" "$tmp/arm.txt"
  diff "$tmp/x86.txt" "$tmp/arm.txt" > "$tmp/diff.txt" || fail "'$args' prints differently on aarch64:
$(head -40 "$tmp/diff.txt")"
done

# ---- 5. checkpoints across architectures -------------------------------------------------------------
# A run of 3 steps (checkpoint at 3) on one architecture, continued to 6 on the other: the same
# losses as the uninterrupted x86 run.
# cross_resume WRITER READER: WRITER saves at step 3, READER verifies the checksums (inspect)
# and resumes to step 6.
cross_resume() {
  local writer=$1 reader=$2 dir="$tmp/from_$1"
  run "$writer" 1 "$dir" --set training.max_steps=3 || fail "$writer, 3 steps: $(tail -20 "$dir.log")"
  local inspect=("$SO_BIN")
  [[ $reader == arm ]] && inspect=("${arm[@]}")
  out=$("${inspect[@]}" inspect "$dir/checkpoints/step_00000003" 2>&1) || fail "$reader inspect of the $writer checkpoint: $out"
  expect_contains "$out" "match their recorded sizes and CRC32C" "checksums of the $writer checkpoint verified on $reader"
  run "$reader" 1 "$dir" || fail "$reader resume of the $writer checkpoint: $(tail -20 "$dir.log")"
  expect_contains "$(cat "$dir.log")" "resumed from $dir/checkpoints/step_00000003" "$reader resumed the $writer checkpoint"
  same_losses "$tmp/x86_1" "$dir" 4
}
cross_resume arm x86
cross_resume x86 arm
echo "aarch64 under qemu: version, plugins, config, plan, training at 1 and 2 ranks, checkpoints both ways: ok"
