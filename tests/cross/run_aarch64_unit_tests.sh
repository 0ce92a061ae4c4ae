#!/usr/bin/env bash
# The unit tests of the aarch64 build (build-aarch64/, made by scripts/setup --target aarch64),
# run by its own ctest: CMake's cross-compiling emulator puts each under qemu-aarch64 with the
# build's sysroot. Skipped, saying why, when that build or its tests are missing.
set -uo pipefail
arm_build="${SO_ARM_BUILD:-$SO_SOURCE_DIR/build-aarch64}"
if [[ ! -f $arm_build/CTestTestfile.cmake || ! -x $arm_build/bin/test_cpu_adamw ]]; then
  echo "SKIPPED: no aarch64 unit tests in $arm_build (build them with: scripts/setup --target aarch64)"
  exit 0
fi
cd "$arm_build" && exec ctest --output-on-failure --parallel "${SUPEROFFLOAD_JOBS:-2}"
