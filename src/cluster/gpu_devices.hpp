// The GPUs this process can see, and which CPUs are near each. Two implementations:
// gpu_devices_cuda.cpp (CUDA path) and gpu_devices_none.cpp (CPU-only build).
#pragma once

#include <string>
#include <vector>

#include "cluster/cpu_set.hpp"

namespace superoffload::cluster {

class Topology;

struct GpuInfo {
  std::string name;
  std::string pci_bus_id;
  size_t memory_bytes = 0;
  CpuSet near_cpus;  // empty when the locality is unknown
};

// Visible GPUs; empty when CUDA is not compiled in, no driver is loaded, or none is visible.
// `why_none` receives the reason when the list is empty.
std::vector<GpuInfo> visible_gpus(const Topology& topology, std::string* why_none);

// Compiled-in and loaded CUDA runtime and NCCL versions, for `superoffload version`.
struct CudaVersions {
  bool compiled = false;
  std::string runtime_compiled, runtime_loaded, driver, nccl_compiled, nccl_loaded;
};
CudaVersions cuda_versions();

}  // namespace superoffload::cluster
