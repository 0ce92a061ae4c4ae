# Finds LibTorch and decides whether the CUDA/NCCL path is compiled.
#
# LibTorch: Torch_DIR / CMAKE_PREFIX_PATH if they find one (any LibTorch >= 2.4), else the
# torch package of SUPEROFFLOAD_PYTHON (scripts/setup installs the pinned wheel in .venv/).
#
# CUDA/NCCL (SUPEROFFLOAD_CUDA = AUTO | ON | OFF): compiled when LibTorch was built with
# CUDA, the CUDA toolkit was found (LibTorch's own config looks for it), an NCCL with
# headers is found, and both have the CUDA runtime major version and NCCL version that
# LibTorch itself uses. AUTO falls back to the CPU path with the reason; ON stops.
#
# SUPEROFFLOAD_LIBTORCH_CPU_DIR (a wheel's torch/ directory) skips all of this: see
# SuperoffloadTorchCpuOnly.cmake.
#
# Sets: SUPEROFFLOAD_WITH_CUDA (ON/OFF), SUPEROFFLOAD_CUDA_SUMMARY (text), target
# superoffload::nccl (when ON), SUPEROFFLOAD_TORCH_CUDA_VERSION, SUPEROFFLOAD_TORCH_NCCL_VERSION,
# SUPEROFFLOAD_TORCH_TARGETS (what our targets link for LibTorch: see the end).

set(SUPEROFFLOAD_LIBTORCH_CPU_DIR "" CACHE PATH
  "The torch package of a wheel, linked by its CPU libraries only (libtorch_cpu, libc10): the aarch64 cross build")
if(SUPEROFFLOAD_LIBTORCH_CPU_DIR)
  include(SuperoffloadTorchCpuOnly)
  return()
endif()

set(_so_torch_python_prefix "")
set(SUPEROFFLOAD_TORCH_CUDA_VERSION "")
set(SUPEROFFLOAD_TORCH_NCCL_VERSION "")
if(EXISTS "${SUPEROFFLOAD_PYTHON}")
  # One call gives the prefix and what the wheel was built with (None on CPU-only builds).
  execute_process(
    COMMAND "${SUPEROFFLOAD_PYTHON}" -c
      "import torch, torch.utils; nccl = torch.cuda.nccl.version() if torch.version.cuda else None; print(torch.utils.cmake_prefix_path); print(torch.version.cuda or ''); print('.'.join(map(str, nccl)) if nccl else '')"
    OUTPUT_VARIABLE _so_torch_query OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_VARIABLE _so_torch_query_err RESULT_VARIABLE _so_torch_query_rc)
  if(_so_torch_query_rc EQUAL 0)
    string(REPLACE "\n" ";" _so_torch_query "${_so_torch_query}")
    list(LENGTH _so_torch_query _n)
    list(GET _so_torch_query 0 _so_torch_python_prefix)
    if(_n GREATER 1)
      list(GET _so_torch_query 1 SUPEROFFLOAD_TORCH_CUDA_VERSION)
    endif()
    if(_n GREATER 2)
      list(GET _so_torch_query 2 SUPEROFFLOAD_TORCH_NCCL_VERSION)
    endif()
  else()
    message(STATUS "superoffload: ${SUPEROFFLOAD_PYTHON} has no usable torch: ${_so_torch_query_err}")
  endif()
endif()

# LibTorch's CUDA config otherwise probes the installed GPUs with a try_run (which fails on
# GPU-less build hosts). superoffload has no CUDA kernels of its own; the list only matters
# to code compiled with nvcc. Hopper (H100/GH200) by default; override as usual.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "9.0")
endif()
find_package(Torch 2.4 QUIET)
if(NOT Torch_FOUND)
  if(NOT _so_torch_python_prefix)
    message(FATAL_ERROR
      "LibTorch >= 2.4 not found.\n"
      "HINT: run scripts/setup (installs the pinned torch wheel into .venv/), or pass "
      "-DCMAKE_PREFIX_PATH=/path/to/libtorch, or -DSUPEROFFLOAD_PYTHON=/path/to/python-with-torch.")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${_so_torch_python_prefix}")
  find_package(Torch 2.4 REQUIRED)
endif()
# A LibTorch built with the old C++ ABI needs every TU of ours to use it as well, since
# std::string crosses the boundary everywhere (plugins included).
if(TORCH_CXX_FLAGS)
  add_compile_options(${TORCH_CXX_FLAGS})
endif()
get_filename_component(SUPEROFFLOAD_TORCH_LIB_DIR "${TORCH_LIBRARY}" DIRECTORY)

set(SUPEROFFLOAD_WITH_CUDA OFF)
set(SUPEROFFLOAD_CUDA_SUMMARY "disabled by SUPEROFFLOAD_CUDA=OFF")

function(_so_cuda_unavailable reason)
  if(SUPEROFFLOAD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SUPEROFFLOAD_CUDA=ON but the CUDA/NCCL path cannot be compiled: ${reason}")
  endif()
  message(STATUS "superoffload: CUDA/NCCL path not compiled: ${reason}")
  set(SUPEROFFLOAD_CUDA_SUMMARY "not compiled: ${reason}" PARENT_SCOPE)
endfunction()

if(NOT SUPEROFFLOAD_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "SUPEROFFLOAD_CUDA must be AUTO, ON or OFF, not '${SUPEROFFLOAD_CUDA}'")
endif()

if(NOT SUPEROFFLOAD_CUDA STREQUAL "OFF")
  if(NOT TARGET torch_cuda AND NOT TORCH_CUDA_LIBRARIES)
    _so_cuda_unavailable("LibTorch at ${SUPEROFFLOAD_TORCH_LIB_DIR} was built without CUDA")
  elseif(NOT TARGET CUDA::cudart)
    _so_cuda_unavailable("the CUDA toolkit (CUDA::cudart) was not found; set CUDAToolkit_ROOT")
  elseif(SUPEROFFLOAD_TORCH_CUDA_VERSION AND
         NOT SUPEROFFLOAD_TORCH_CUDA_VERSION VERSION_EQUAL
             "${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")
    _so_cuda_unavailable("the CUDA toolkit is ${CUDAToolkit_VERSION} but LibTorch was built with "
      "CUDA ${SUPEROFFLOAD_TORCH_CUDA_VERSION}; point CUDAToolkit_ROOT at a matching toolkit")
  else()
    # NCCL: the copy that ships with the torch wheel first (it is what LibTorch loads), then
    # NCCL_ROOT, then the CUDA toolkit.
    set(_so_nccl_hints "")
    if(DEFINED ENV{NCCL_ROOT})
      list(APPEND _so_nccl_hints "$ENV{NCCL_ROOT}")
    endif()
    list(APPEND _so_nccl_hints "${SUPEROFFLOAD_TORCH_LIB_DIR}/../../nvidia/nccl"
      "${CUDAToolkit_LIBRARY_ROOT}" "${CUDAToolkit_TARGET_DIR}")
    find_path(SUPEROFFLOAD_NCCL_INCLUDE_DIR nccl.h HINTS ${_so_nccl_hints} PATH_SUFFIXES include
      NO_DEFAULT_PATH)
    find_library(SUPEROFFLOAD_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_so_nccl_hints}
      PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
    if(NOT SUPEROFFLOAD_NCCL_INCLUDE_DIR OR NOT SUPEROFFLOAD_NCCL_LIBRARY)
      _so_cuda_unavailable("NCCL (nccl.h and libnccl.so.2) not found; set NCCL_ROOT")
    else()
      file(STRINGS "${SUPEROFFLOAD_NCCL_INCLUDE_DIR}/nccl.h" _so_nccl_defs
        REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
      foreach(_part MAJOR MINOR PATCH)
        string(REGEX REPLACE ".*#define NCCL_${_part} +([0-9]+).*" "\\1" _so_nccl_${_part} "${_so_nccl_defs}")
      endforeach()
      set(SUPEROFFLOAD_NCCL_VERSION "${_so_nccl_MAJOR}.${_so_nccl_MINOR}.${_so_nccl_PATCH}")
      if(SUPEROFFLOAD_TORCH_NCCL_VERSION AND
         NOT SUPEROFFLOAD_TORCH_NCCL_VERSION VERSION_EQUAL SUPEROFFLOAD_NCCL_VERSION)
        _so_cuda_unavailable("NCCL at ${SUPEROFFLOAD_NCCL_INCLUDE_DIR} is ${SUPEROFFLOAD_NCCL_VERSION} "
          "but LibTorch uses NCCL ${SUPEROFFLOAD_TORCH_NCCL_VERSION}; set NCCL_ROOT to that one")
      else()
        add_library(superoffload_nccl SHARED IMPORTED GLOBAL)
        add_library(superoffload::nccl ALIAS superoffload_nccl)
        set_target_properties(superoffload_nccl PROPERTIES
          IMPORTED_LOCATION "${SUPEROFFLOAD_NCCL_LIBRARY}"
          INTERFACE_INCLUDE_DIRECTORIES "${SUPEROFFLOAD_NCCL_INCLUDE_DIR}")
        set(SUPEROFFLOAD_WITH_CUDA ON)
        set(SUPEROFFLOAD_CUDA_SUMMARY
          "CUDA ${CUDAToolkit_VERSION} at ${CUDAToolkit_TARGET_DIR}, NCCL ${SUPEROFFLOAD_NCCL_VERSION} at ${SUPEROFFLOAD_NCCL_LIBRARY}")
        message(STATUS "superoffload: CUDA/NCCL path compiled: ${SUPEROFFLOAD_CUDA_SUMMARY}")
      endif()
    endif()
  endif()
endif()

# What our targets link for LibTorch: its CPU libraries, and c10_cuda (streams, devices) on the
# CUDA path, not LibTorch's `torch` target. That one links libtorch_cuda.so with --no-as-needed
# into every program although nothing calls it by name (its static initialisers register the
# CUDA kernels), which costs each process ~0.45 s at start where no GPU can use it.
# src/model/torch_cuda_backend.cpp opens it at start where an NVIDIA driver is.
# Installed with the model library (superoffload::torch), for plugins built out of tree.
add_library(superoffload_torch INTERFACE)
target_link_libraries(superoffload_torch INTERFACE torch_cpu_library)
if(SUPEROFFLOAD_WITH_CUDA)
  target_link_libraries(superoffload_torch INTERFACE c10_cuda)
endif()
# `torch`'s include directories (with torch/csrc/api/include), looked up where it is used.
target_include_directories(superoffload_torch INTERFACE "$<TARGET_PROPERTY:torch,INTERFACE_INCLUDE_DIRECTORIES>")
set(SUPEROFFLOAD_TORCH_TARGETS superoffload_torch)
