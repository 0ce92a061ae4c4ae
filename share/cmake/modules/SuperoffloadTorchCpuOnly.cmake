# LibTorch from a wheel's torch/ directory, linked by its CPU libraries only: the aarch64
# cross build (scripts/setup --target aarch64). The wheel's own CMake config cannot be used
# there: it looks for the CUDA toolkit of the build host, an x86 one. GH200 users install the
# CUDA build of this wheel; its libtorch_cpu.so needs libcudart and libcupti to load (not to
# run), which come from their own wheels next to it (nvidia/cu13/lib, found by its RPATH).
#
# Sets what SuperoffloadTorch.cmake sets: target torch, Torch_VERSION, TORCH_LIBRARY,
# SUPEROFFLOAD_TORCH_LIB_DIR, SUPEROFFLOAD_WITH_CUDA (OFF), SUPEROFFLOAD_CUDA_SUMMARY.

set(_so_dir "${SUPEROFFLOAD_LIBTORCH_CPU_DIR}")
foreach(_so_file lib/libtorch_cpu.so lib/libc10.so include/ATen/ATen.h version.py)
  if(NOT EXISTS "${_so_dir}/${_so_file}")
    message(FATAL_ERROR "SUPEROFFLOAD_LIBTORCH_CPU_DIR=${_so_dir} has no ${_so_file}\n"
      "HINT: point it at the torch/ directory of an unpacked torch wheel (scripts/setup --target aarch64 does this).")
  endif()
endforeach()
if(SUPEROFFLOAD_CUDA STREQUAL "ON")
  message(FATAL_ERROR "SUPEROFFLOAD_CUDA=ON cannot be met with SUPEROFFLOAD_LIBTORCH_CPU_DIR (CPU libraries only)")
endif()

file(STRINGS "${_so_dir}/version.py" _so_version_line REGEX "^__version__ *=")
string(REGEX REPLACE ".*'([0-9]+\\.[0-9]+\\.[0-9]+).*" "\\1" Torch_VERSION "${_so_version_line}")
if(Torch_VERSION VERSION_LESS 2.4)
  message(FATAL_ERROR "LibTorch at ${_so_dir} is ${Torch_VERSION}; superoffload needs 2.4 or newer")
endif()

add_library(torch INTERFACE IMPORTED GLOBAL)
set_target_properties(torch PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${_so_dir}/include;${_so_dir}/include/torch/csrc/api/include"
  INTERFACE_LINK_LIBRARIES "${_so_dir}/lib/libtorch_cpu.so;${_so_dir}/lib/libc10.so")
set(TORCH_LIBRARY "${_so_dir}/lib/libtorch_cpu.so")
set(SUPEROFFLOAD_TORCH_TARGETS torch)
set(SUPEROFFLOAD_TORCH_LIB_DIR "${_so_dir}/lib")
set(SUPEROFFLOAD_WITH_CUDA OFF)
set(SUPEROFFLOAD_CUDA_SUMMARY "not compiled: LibTorch ${Torch_VERSION} linked by its CPU libraries only (${_so_dir})")
message(STATUS "superoffload: LibTorch ${Torch_VERSION}, CPU libraries only, from ${_so_dir}")
