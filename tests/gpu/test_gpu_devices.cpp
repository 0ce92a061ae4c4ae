// On a GPU machine: the CUDA path sees the GPUs, the runtime and NCCL that are loaded are
// the ones compiled against, and a rank is bound near its GPU. Skipped without a GPU.
#include <gtest/gtest.h>

#include "cluster/binding_plan.hpp"
#include "cluster/gpu_devices.hpp"
#include "cluster/topology.hpp"

namespace so = superoffload::cluster;

namespace {

std::vector<so::GpuInfo> gpus_or_skip(const so::Topology& topology, std::string* why) {
  return so::visible_gpus(topology, why);
}

TEST(GpuDevices, VisibleGpusHaveNamesMemoryAndLocality) {
  const auto topology = so::Topology::this_machine();
  std::string why;
  const auto gpus = gpus_or_skip(topology, &why);
  if (gpus.empty()) GTEST_SKIP() << "no GPU visible: " << why;
  for (const auto& gpu : gpus) {
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GT(gpu.memory_bytes, size_t{1} << 30);
    EXPECT_FALSE(gpu.pci_bus_id.empty());
  }
  // The near CPUs, where sysfs reports them, are CPUs this process may use.
  so::BindingRequest request;
  request.allowed_cores = topology.allowed_cores();
  request.current = topology.current_binding();
  request.visible_gpus = static_cast<int>(gpus.size());
  for (const auto& gpu : gpus) request.gpu_locality.push_back(gpu.near_cpus);
  const auto intent = so::decide_binding(request);
  EXPECT_EQ(intent.gpu, 0);
}

TEST(GpuDevices, LoadedRuntimeAndNcclMatchTheBuild) {
  const auto topology = so::Topology::this_machine();
  std::string why;
  if (gpus_or_skip(topology, &why).empty()) GTEST_SKIP() << "no GPU visible: " << why;
  const auto v = so::cuda_versions();
  ASSERT_TRUE(v.compiled);
  EXPECT_EQ(v.runtime_loaded, v.runtime_compiled);
  EXPECT_EQ(v.nccl_loaded, v.nccl_compiled);
  EXPECT_NE(v.driver, "no driver");
}

}  // namespace
