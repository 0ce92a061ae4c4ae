// hwloc-backed topology queries and binding.
#include "cluster/topology.hpp"

#include <hwloc.h>

#include <cerrno>
#include <cstring>

#include "base/error.hpp"

namespace superoffload::cluster {
namespace {

CpuSet to_cpu_set(hwloc_const_bitmap_t bitmap) {
  std::vector<int> cpus;
  int index = 0;
  hwloc_bitmap_foreach_begin(index, bitmap) { cpus.push_back(index); }
  hwloc_bitmap_foreach_end();
  return CpuSet(std::move(cpus));
}

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

Bitmap to_bitmap(const CpuSet& set) {
  Bitmap bitmap(hwloc_bitmap_alloc());
  for (int cpu : set.cpus()) hwloc_bitmap_set(bitmap.get(), static_cast<unsigned>(cpu));
  return bitmap;
}

}  // namespace

Topology Topology::this_machine() {
  hwloc_topology_t topology = nullptr;
  SO_CHECK(hwloc_topology_init(&topology) == 0, "hwloc_topology_init failed");
  // GPUs' PCI locality is found through sysfs by the CUDA helpers; no I/O objects needed.
  if (hwloc_topology_load(topology) != 0) {
    hwloc_topology_destroy(topology);
    SO_FAIL("hwloc could not read this machine's topology: " << std::strerror(errno)
            << hint("set [runtime] bind = \"none\" to run without binding"));
  }
  return Topology(topology);
}

Topology Topology::synthetic(const std::string& description) {
  hwloc_topology_t topology = nullptr;
  SO_CHECK(hwloc_topology_init(&topology) == 0, "hwloc_topology_init failed");
  if (hwloc_topology_set_synthetic(topology, description.c_str()) != 0 || hwloc_topology_load(topology) != 0) {
    hwloc_topology_destroy(topology);
    SO_FAIL("invalid synthetic hwloc topology '" << description << "'");
  }
  return Topology(topology);
}

Topology::~Topology() {
  if (topology_) hwloc_topology_destroy(topology_);
}
Topology::Topology(Topology&& other) noexcept : topology_(other.topology_) { other.topology_ = nullptr; }
Topology& Topology::operator=(Topology&& other) noexcept {
  std::swap(topology_, other.topology_);
  return *this;
}

std::vector<Core> Topology::allowed_cores() const {
  std::vector<Core> cores;
  const int depth = hwloc_get_type_or_below_depth(topology_, HWLOC_OBJ_CORE);
  const int count = hwloc_get_nbobjs_by_depth(topology_, depth);
  hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(topology_);
  for (int i = 0; i < count; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_depth(topology_, depth, static_cast<unsigned>(i));
    Bitmap usable(hwloc_bitmap_alloc());
    hwloc_bitmap_and(usable.get(), obj->cpuset, allowed);
    if (hwloc_bitmap_iszero(usable.get())) continue;
    Core core;
    core.pus = to_cpu_set(usable.get());
    // The NUMA node whose CPUs contain this core (memory-only nodes such as a GH200's HBM
    // have no CPUs and never match).
    hwloc_obj_t numa = nullptr;
    while ((numa = hwloc_get_next_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, numa)) != nullptr) {
      if (hwloc_bitmap_isincluded(obj->cpuset, numa->cpuset)) {
        core.numa_node = static_cast<int>(numa->os_index);
        break;
      }
    }
    cores.push_back(std::move(core));
  }
  return cores;
}

CpuSet Topology::current_binding() const {
  Bitmap bitmap(hwloc_bitmap_alloc());
  if (hwloc_get_cpubind(topology_, bitmap.get(), HWLOC_CPUBIND_PROCESS) != 0) {
    // Not supported (synthetic topology) or not allowed: treat as unbound.
    return to_cpu_set(hwloc_topology_get_allowed_cpuset(topology_));
  }
  return to_cpu_set(bitmap.get());
}

void Topology::bind_process(const CpuSet& cpus) const {
  auto bitmap = to_bitmap(cpus);
  if (hwloc_set_cpubind(topology_, bitmap.get(), HWLOC_CPUBIND_PROCESS) != 0) {
    SO_FAIL("binding this process to CPUs " << cpus.to_string() << " failed: " << std::strerror(errno)
            << hint("set [runtime] bind = \"none\", or bind with the launcher (srun --cpu-bind=...)"));
  }
}

std::vector<int> Topology::numa_nodes_of(const CpuSet& cpus) const {
  auto bitmap = to_bitmap(cpus);
  std::vector<int> nodes;
  hwloc_obj_t numa = nullptr;
  while ((numa = hwloc_get_next_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, numa)) != nullptr) {
    if (hwloc_bitmap_intersects(numa->cpuset, bitmap.get())) nodes.push_back(static_cast<int>(numa->os_index));
  }
  return nodes;
}

}  // namespace superoffload::cluster
