// GPU discovery for builds without the CUDA path.
#include "cluster/gpu_devices.hpp"

namespace superoffload::cluster {

std::vector<GpuInfo> visible_gpus(const Topology&, std::string* why_none) {
  if (why_none) *why_none = "built without the CUDA/NCCL path (SUPEROFFLOAD_CUDA)";
  return {};
}

CudaVersions cuda_versions() { return {}; }

}  // namespace superoffload::cluster
