// Host pinning through the CUDA runtime.
#include <cuda_runtime_api.h>

#include "cluster/check_cuda.hpp"
#include "cluster/host_pinning.hpp"

namespace superoffload::cluster {

bool pin_host_range(void* data, size_t bytes, std::string& why) {
  if (const cudaError_t rc = cudaHostRegister(data, bytes, cudaHostRegisterDefault); rc != cudaSuccess) {
    why = "cudaHostRegister of " + std::to_string(bytes >> 20) + " MiB: " + detail::describe_cuda_error(rc);
    cudaGetLastError();  // not sticky: clear it so that later calls start clean
    return false;
  }
  return true;
}

void unpin_host_range(void* data) {
  if (cudaHostUnregister(data) != cudaSuccess) cudaGetLastError();
}

}  // namespace superoffload::cluster
