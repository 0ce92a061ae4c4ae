// CUDA and NCCL error decoding (CUDA path only).
#include "cluster/check_cuda.hpp"

namespace superoffload::detail {

std::string describe_cuda_error(cudaError_t code) {
  return std::string(cudaGetErrorName(code)) + ": " + cudaGetErrorString(code);
}

std::string describe_nccl_error(ncclResult_t code) {
  std::string out = ncclGetErrorString(code);
  // ncclGetLastError carries the detail (which peer, which transport) when there is one.
  if (const char* last = ncclGetLastError(nullptr); last && *last) out += std::string(": ") + last;
  return out;
}

}  // namespace superoffload::detail
