#!/usr/bin/env bash
# Configures, builds and runs the aarch64 kernel test under qemu (see CMakeLists.txt here).
# Skipped, saying why, where the cross toolchain or qemu is missing.
set -uo pipefail
source_dir="$(cd "$(dirname "$0")" && pwd)"
build_dir="$1"
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  command -v "$tool" > /dev/null || { echo "SKIPPED: $tool is not installed (scripts/setup installs it as root)"; exit 0; }
done
[[ -f /usr/lib/aarch64-linux-gnu/cmake/hwy/hwy-config.cmake ]] \
  || { echo "SKIPPED: libhwy-dev:arm64 is not installed (scripts/setup installs it as root)"; exit 0; }
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$source_dir" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$source_dir/../../share/cmake/toolchains/aarch64-linux-gnu.cmake" > "$build_dir.log" 2>&1 \
  || { cat "$build_dir.log"; exit 1; }
cmake --build "$build_dir" >> "$build_dir.log" 2>&1 || { tail -40 "$build_dir.log"; exit 1; }
file "$build_dir/test_cpu_adamw_aarch64" | grep -q "ARM aarch64" || { echo "not an aarch64 binary"; exit 1; }
# Every test of the binary, the thread pool's included, under the multiarch libc6:arm64 (-L /:
# its ld.so and libc.so from one glibc build; see the toolchain file).
qemu-aarch64 -L / -cpu max "$build_dir/test_cpu_adamw_aarch64"
