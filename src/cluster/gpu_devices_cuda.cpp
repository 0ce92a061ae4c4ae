// GPU discovery through the CUDA runtime; CPU locality from hwloc's CUDA helper (sysfs).
#include <cuda_runtime_api.h>
#include <hwloc.h>
#include <hwloc/cudart.h>
#include <nccl.h>

#include "cluster/check_cuda.hpp"
#include "cluster/gpu_devices.hpp"
#include "cluster/topology.hpp"

namespace superoffload::cluster {
namespace {

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string nccl_version_text(int code) {
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return std::to_string(code / 10000) + "." + std::to_string((code % 10000) / 100) + "." + std::to_string(code % 100);
}

}  // namespace

std::vector<GpuInfo> visible_gpus(const Topology& topology, std::string* why_none) {
  int count = 0;
  if (const cudaError_t rc = cudaGetDeviceCount(&count); rc != cudaSuccess) {
    if (why_none) *why_none = "CUDA reports no usable GPU: " + detail::describe_cuda_error(rc);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return {};
  }
  if (count == 0 && why_none) *why_none = "CUDA sees no GPU (check CUDA_VISIBLE_DEVICES)";
  std::vector<GpuInfo> gpus;
  for (int device = 0; device < count; ++device) {
    cudaDeviceProp props{};
    SO_CHECK_CUDA(cudaGetDeviceProperties(&props, device));
    GpuInfo info;
    info.name = props.name;
    info.memory_bytes = props.totalGlobalMem;
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) == cudaSuccess) info.pci_bus_id = bus_id;
    hwloc_bitmap_t near = hwloc_bitmap_alloc();
    if (hwloc_cudart_get_device_cpuset(topology.raw(), device, near) == 0 && !hwloc_bitmap_iszero(near) &&
        !hwloc_bitmap_isfull(near)) {
      std::vector<int> cpus;
      int cpu = 0;
      hwloc_bitmap_foreach_begin(cpu, near) { cpus.push_back(cpu); }
      hwloc_bitmap_foreach_end();
      info.near_cpus = CpuSet(std::move(cpus));
    }
    hwloc_bitmap_free(near);
    gpus.push_back(std::move(info));
  }
  return gpus;
}

CudaVersions cuda_versions() {
  CudaVersions v;
  v.compiled = true;
  v.runtime_compiled = cuda_version_text(CUDART_VERSION);
  int runtime = 0, driver = 0, nccl = 0;
  v.runtime_loaded = cudaRuntimeGetVersion(&runtime) == cudaSuccess ? cuda_version_text(runtime) : "unavailable";
  v.driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0 ? cuda_version_text(driver) : "no driver";
  v.nccl_compiled = nccl_version_text(NCCL_VERSION_CODE);
  v.nccl_loaded = ncclGetVersion(&nccl) == ncclSuccess ? nccl_version_text(nccl) : "unavailable";
  return v;
}

}  // namespace superoffload::cluster
