#!/usr/bin/env bash
# Packs what a lent GPU machine needs to run this build, into one archive that travels with
# the working tree (the device tool carries at most 64 MiB): the programs and libraries of
# build/, the GPU tests' commands as CTest lists them, and the Debian libraries they link that
# such a machine lacks (Open MPI with its plugins, orted and PMIx, HDF5, Boost.Log, hwloc,
# ICU, protobuf, ...). LibTorch, CUDA and NCCL are not packed: the machine's own PyTorch is
# the same wheel (bench/gpu_session.sh checks the version) and provides them.
#
#   bench/gpu_bundle.sh [--build build] [--out .gpu/bundle.tar.xz] [--no-wheels]
# Run here after scripts/setup; then `bench/gpu_session.sh` on the machine unpacks it.
# Beside the archive, in .gpu/wheels/: DeepSpeed (built into a wheel here: PyPI has its source
# only) and the needs of it that the lent machine's image lacks, for its Python (3.12), so that
# the session's deepspeed part can run bench/deepspeed_compare/compare.sh there (4 MB).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$here/build out=$here/.gpu/bundle.tar.xz wheels=1
while (($#)); do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift ;; --out) out=$2; shift ;; --no-wheels) wheels=0 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_bundle.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
# DeepSpeed's release that the comparison names (0.19.x: ZeRO-3 with super_offload).
deepspeed_version=0.19.8
# Every GPU unit test the build made (test_gpu_*), not a list kept by hand: one test added to
# tests/gpu and missing here (test_gpu_swiglu) stopped a lent session's tests part.
programs=(superoffload superoffload_demo_corpus train_parity offload_parity bench_zero_step bench_cpu_adamw
  bench_moe_layer bench_fused_projections)
for p in "$build"/bin/test_gpu_*; do [[ -x $p ]] && programs+=("$(basename "$p")"); done
for p in "${programs[@]}"; do
  [[ -x $build/bin/$p ]] || { echo "gpu_bundle.sh: $build/bin/$p is missing: run scripts/setup first" >&2; exit 1; }
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
mkdir -p "$root/build/bin" "$root/lib" "$root/usr/bin" "$root/usr/lib/x86_64-linux-gnu" "$root/usr/share"

# The build: programs (stripped), the libraries and plugins they load, the GPU tests' commands.
for p in "${programs[@]}"; do strip -o "$root/build/bin/$p" "$build/bin/$p"; done
(cd "$build" && find lib -name '*.so' | tar -cf - -T -) | tar -C "$root/build" -xf -
(cd "$build" && ctest -L gpu --show-only=json-v1) > "$root/build/gpu_tests.json"
grep -E '^(CMAKE_BUILD_TYPE|CMAKE_CXX_COMPILER|SUPEROFFLOAD_PYTHON|MPIEXEC_EXECUTABLE):' \
  "$build/CMakeCache.txt" > "$root/build/cache.txt"
"$here/.venv/bin/python" -c 'import torch; print(torch.__version__)' > "$root/build/torch_version.txt"
# The programs' RUNPATHs are relative ($ORIGIN): the session links the tree's site-packages path
# to the machine's PyTorch and rewrites the tests' commands from this root to its own.
echo "$here" > "$root/build/built_root.txt"
realpath --relative-to="$here" "$("$here/.venv/bin/python" -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')" \
  > "$root/build/torch_site.txt"

# Open MPI as Debian lays it out, relocatable with OPAL_PREFIX (and PMIx with PMIX_PREFIX).
multi=/usr/lib/x86_64-linux-gnu
cp -a "$multi/openmpi" "$multi/pmix2" "$root/usr/lib/x86_64-linux-gnu/"
cp -a /usr/share/openmpi "$root/usr/share/"
cp -a /usr/bin/orted /usr/bin/orterun /usr/bin/ompi_info "$root/usr/bin/"
ln -s orterun "$root/usr/bin/mpirun"
ln -s orterun "$root/usr/bin/mpiexec"

# Every shared library those files need, except the C/C++ runtime (a machine has its own, of
# the same or a later version) and LibTorch/CUDA/NCCL (from the machine's PyTorch).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libutil\.so|libresolv\.so|libstdc\+\+|libgcc_s|libtorch|libc10|libcuda|libcudart|libnccl|libcublas|libcudnn|libcufft|libcurand|libcusparse|libcusolver|libnvrtc|libnvJitLink|libcupti|libnvToolsExt|libsuperoffload|libsave_gate)'
mapfile -t objects < <(find "$root/build/bin" "$root/build/lib" "$root/usr" -type f \( -perm -u+x -o -name '*.so*' \))
for o in "${objects[@]}"; do
  ldd "$o" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip || $path == */site-packages/* || $path == /usr/local/cuda* ]] && continue
  [[ -e $root/lib/$name ]] || cp -L "$path" "$root/lib/$name"
done

mkdir -p "$(dirname "$out")"
tar -C "$root" -cf - . | xz -T0 -6 > "$out"
echo "gpu_bundle.sh: $(du -h "$out" | cut -f1) in $out ($(find "$root" -type f | wc -l) files, $(du -sh "$root" | cut -f1) unpacked)"

# DeepSpeed for the comparison. The image has PyTorch, transformers, accelerate, einops, msgpack,
# ninja, numpy, psutil, py-cpuinfo and tqdm (KINDS.md of the device tool); hjson and pydantic come
# with pydantic's own needs, resolved for the machine's CPython 3.12 (pydantic-core is compiled). Its CUDA ops are compiled there,
# on first use (nvcc and ninja are installed).
if ((wheels)); then
  dir=$(dirname "$out")/wheels
  rm -rf "$dir" && mkdir -p "$dir"
  if DS_BUILD_OPS=0 python3 -m pip wheel --quiet --no-deps -w "$dir" "deepspeed==$deepspeed_version" &&
    python3 -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dir" hjson pydantic; then
    echo "gpu_bundle.sh: $(du -sh "$dir" | cut -f1) of wheels in $dir: $(cd "$dir" && ls | tr '\n' ' ')"
  else
    echo "gpu_bundle.sh: could not fetch DeepSpeed's wheels (no PyPI here?): the session's deepspeed part will say so" >&2
  fi
fi
