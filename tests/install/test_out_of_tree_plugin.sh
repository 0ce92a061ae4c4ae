#!/usr/bin/env bash
# Installs superoffload to a temporary prefix, builds tests/install/example_plugin out of
# tree against the installed package (find_package(superoffload), superoffload_add_plugin),
# and checks that the installed program loads it and evaluates its model as plain PyTorch does.
source "$(dirname "$0")/../cli/lib.sh"

prefix="$tmp/prefix"
cmake --install "$SO_BUILD_DIR" --prefix "$prefix" > "$tmp/install.log" 2>&1 || fail "install: $(tail -20 "$tmp/install.log")"
[[ -f $prefix/lib/cmake/superoffload/superoffloadConfig.cmake ]] || fail "no CMake package installed"
[[ -f $prefix/lib/superoffload/plugins/libsuperoffload_llama.so ]] || fail "shipped plugins not installed"

generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cuda=()
[[ -x /usr/local/cuda/bin/nvcc ]] && cuda=(-DCUDAToolkit_ROOT=/usr/local/cuda)
cmake -S "$SO_SOURCE_DIR/tests/install/example_plugin" -B "$tmp/plugin" "${generator[@]}" "${cuda[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" > "$tmp/configure.log" 2>&1 \
  || fail "configuring the out-of-tree plugin: $(tail -30 "$tmp/configure.log")"
cmake --build "$tmp/plugin" > "$tmp/build.log" 2>&1 || fail "building the out-of-tree plugin: $(tail -30 "$tmp/build.log")"

export SUPEROFFLOAD_PLUGIN_PATH="$tmp/plugin/plugins"
out=$("$prefix/bin/superoffload" plugins 2>&1) || fail "installed superoffload plugins: $out"
expect_contains "$out" "residual_mlp 0.1.0: ResidualMlpForCausalLM" "out-of-tree plugin listed"
expect_contains "$out" "$prefix/lib/superoffload/plugins/libsuperoffload_llama.so" "installed plugins found"

reference=$("$SO_PYTHON" "$SO_SOURCE_DIR/tests/install/residual_mlp_reference.py" "$tmp/model") || fail "reference"
out=$("$prefix/bin/superoffload" eval --model "$tmp/model" --tokens "$tmp/model/tokens.h5" 2>&1) || fail "eval: $out"
loss=$(awk '/^mean loss/ {print $3}' <<<"$out")
"$SO_PYTHON" -c "import sys; a, b = float('$loss'), float('$reference'); sys.exit(0 if abs(a - b) < 1e-5 else 1)" \
  || fail "eval loss $loss differs from the PyTorch reference $reference"
cat > "$tmp/train.toml" <<TOML
[model]
path = "$tmp/model"
[data]
path = "$tmp/model/train.h5"
seq_len = 16
[training]
output_dir = "$tmp/run"
train_micro_batch_size_per_gpu = 4
max_steps = 6
[optimizer]
lr = 1e-2
[runtime]
device = "cpu"
TOML
out=$("$prefix/bin/superoffload" train "$tmp/train.toml" 2>&1) || fail "training with the out-of-tree plugin: $out"
expect_contains "$out" "Step 6/6 | Loss" "training steps"
expect_contains "$out" "plugin residual_mlp 0.1.0" "model built by the out-of-tree plugin"
# The installed tree moved as a whole still runs: our libraries and plugins are found beside the
# program ($ORIGIN), not where the tree was installed.
mv "$prefix" "$tmp/moved"
out=$("$tmp/moved/bin/superoffload" plugins 2>&1) || fail "the moved install: $out"
expect_contains "$out" "$tmp/moved/lib/superoffload/plugins/libsuperoffload_llama.so" "the moved install's plugins"
echo "out-of-tree plugin: built against the installed package, loaded, loss $loss = reference $reference, trained 6 steps; the moved install runs"
