// Checks for CUDA runtime and NCCL calls. Only included by translation units of the CUDA
// path (compiled when SUPEROFFLOAD_WITH_CUDA).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "base/error.hpp"

namespace superoffload::detail {
std::string describe_cuda_error(cudaError_t code);
std::string describe_nccl_error(ncclResult_t code);
inline constexpr const char* kCudaHint =
    "check the GPU with nvidia-smi on that node and that CUDA_VISIBLE_DEVICES / --gpus-per-task "
    "give every rank a GPU";
inline constexpr const char* kNcclHint =
    "rerun with NCCL_DEBUG=INFO; an NCCL error often follows a failure on another rank";
}  // namespace superoffload::detail

#define SO_CHECK_CUDA(call)                                                             \
  do {                                                                                  \
    if (const cudaError_t so_rc_ = (call); so_rc_ != cudaSuccess) [[unlikely]] {        \
      SO_FAIL("CUDA call " #call " failed: " << ::superoffload::detail::describe_cuda_error(so_rc_) \
              << ::superoffload::hint(::superoffload::detail::kCudaHint));              \
    }                                                                                   \
  } while (0)

#define SO_CHECK_NCCL(call)                                                             \
  do {                                                                                  \
    if (const ncclResult_t so_rc_ = (call); so_rc_ != ncclSuccess) [[unlikely]] {       \
      SO_FAIL("NCCL call " #call " failed: " << ::superoffload::detail::describe_nccl_error(so_rc_) \
              << ::superoffload::hint(::superoffload::detail::kNcclHint));              \
    }                                                                                   \
  } while (0)
