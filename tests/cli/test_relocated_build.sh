#!/usr/bin/env bash
# A build copied away from the tree it was built in runs there (#48, part 5): what
# bench/gpu_bundle.sh packs (the program, our libraries, the plugins) is copied beside a .venv
# link standing in for the LibTorch of another machine, and the original tree is hidden in a
# private mount namespace, so that no absolute path of the build can be what makes it work. The
# copy prints its versions, lists its plugins and trains the tiny model for two steps.
# Skipped (with the reason) where mount namespaces cannot be made (not root, no unshare).
source "$(dirname "$0")/lib.sh"
build=$(dirname "$(dirname "$SO_BIN")")
site=$(cd "$SO_SOURCE_DIR/.venv/lib"/python3*/site-packages 2>/dev/null && pwd -P) ||
  { echo "SKIPPED: LibTorch is not the project's .venv here (nothing relative to relocate)"; exit 0; }
python_dir=$(basename "$(dirname "$site")")
if ! unshare -m true 2> /dev/null; then
  echo "SKIPPED: cannot make a mount namespace here (unshare -m needs root): the relocation is not tested"
  exit 0
fi

tree=$tmp/elsewhere
mkdir -p "$tree/build/bin" "$tree/.venv/lib/$python_dir" "$tmp/site" "$tmp/empty" "$tree/configs/models"
cp "$build/bin/superoffload" "$tree/build/bin/"
(cd "$build" && find lib -name '*.so' | tar -cf - -T -) | tar -C "$tree/build" -xf -
ln -s "$tmp/site" "$tree/.venv/lib/$python_dir/site-packages"
cp configs/tiny.toml "$tree/configs/" 2> /dev/null || cp "$SO_SOURCE_DIR/configs/tiny.toml" "$tree/configs/"
cp -r "$SO_SOURCE_DIR/configs/models/tiny-llama" "$tree/configs/models/"
"$SO_DEMO_CORPUS" "$tree/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
# Another machine's LibTorch at the link, the build's tree gone.
hidden=$(cd "$SO_SOURCE_DIR" && pwd -P)
out=$(unshare -m bash -c "mount --bind '$site' '$tmp/site' && mount --bind '$tmp/empty' '$hidden' && cd '$tree' &&
  [[ -z \$(ls '$hidden') ]] && echo 'tree hidden' &&
  build/bin/superoffload version && build/bin/superoffload plugins &&
  build/bin/superoffload train configs/tiny.toml --set data.path=corpus.jsonl --set data.seq_len=32 \
    --set training.max_steps=2 --set training.output_dir=run --set checkpoint.save_on_exit=false" 2>&1) ||
  fail "the relocated build: $out"
expect_contains "$out" "tree hidden" "the original tree hidden"
expect_contains "$out" "LibTorch    2." "the relocated program's version report"
expect_contains "$out" "$tree/build/lib/superoffload/plugins/libsuperoffload_llama.so" "the relocated plugins"
expect_contains "$out" "Step 2/2 | Loss" "the relocated program trains"
echo "relocated build: runs from $tree with $hidden hidden"
