// hwloc-backed topology queries and binding.
#include "cluster/topology.hpp"

#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

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

bool is_gpu_memory(hwloc_obj_t numa) {
  return numa->subtype && (std::strcmp(numa->subtype, "GPUMemory") == 0 || std::strcmp(numa->subtype, "HBM") == 0);
}

// The NUMA node whose memory a core's CPUs are local to. A node without CPUs of its own (a
// GH200's HBM, and its MIG nodes) takes the CPU set of the object it hangs under, so several
// nodes may hold a core: the nearest (smallest CPU set) wins, never GPU memory (hwloc's
// subtype) or a node without memory, and among equals the lowest OS index, as Linux numbers the
// nodes with CPUs first (a GH200's HBM is node 1; a quad GH200's are 4, 12, 20 and 28).
int home_node(hwloc_topology_t topology, hwloc_const_cpuset_t core) {
  hwloc_obj_t best = nullptr;
  hwloc_obj_t numa = nullptr;
  while ((numa = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, numa)) != nullptr) {
    if (!hwloc_bitmap_isincluded(core, numa->cpuset) || is_gpu_memory(numa) || numa->attr->numanode.local_memory == 0) continue;
    const int weight = hwloc_bitmap_weight(numa->cpuset), best_weight = best ? hwloc_bitmap_weight(best->cpuset) : 0;
    if (!best || weight < best_weight || (weight == best_weight && numa->os_index < best->os_index)) best = numa;
  }
  if (!best) {  // only memory-less nodes, e.g. a synthetic topology without sizes: the nearest
    while ((numa = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, numa)) != nullptr) {
      if (hwloc_bitmap_isincluded(core, numa->cpuset) && !is_gpu_memory(numa) &&
          (!best || hwloc_bitmap_weight(numa->cpuset) < hwloc_bitmap_weight(best->cpuset))) {
        best = numa;
      }
    }
  }
  return best ? static_cast<int>(best->os_index) : -1;
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

Topology Topology::from_xml(const std::string& path) {
  hwloc_topology_t topology = nullptr;
  SO_CHECK(hwloc_topology_init(&topology) == 0, "hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_set_xml(topology, path.c_str()) != 0 || hwloc_topology_load(topology) != 0) {
    hwloc_topology_destroy(topology);
    SO_FAIL("cannot load the hwloc XML topology " << path << ": " << std::strerror(errno)
            << hint("write it with `lstopo --of xml` (hwloc 2.x)"));
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
    core.numa_node = home_node(topology_, obj->cpuset);
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

std::string Topology::bind_memory(const std::vector<int>& nodes) const {
  if (nodes.empty()) return "not bound: no NUMA node known for this rank's cores";
  Bitmap current(hwloc_bitmap_alloc());
  hwloc_membind_policy_t policy = HWLOC_MEMBIND_DEFAULT;
  // Linux keeps a memory policy per thread (set_mempolicy), inherited by the threads created
  // afterwards: this (main) thread's, set before LibTorch, the optimizer and the data loader
  // start theirs. hwloc has no process-wide call for it there.
  if (hwloc_get_membind(topology_, current.get(), &policy, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) != 0) {
    return std::string("not bound: the memory policy cannot be read here (") + std::strerror(errno) + ")";
  }
  if (policy != HWLOC_MEMBIND_DEFAULT && policy != HWLOC_MEMBIND_FIRSTTOUCH) {
    char* text = nullptr;
    hwloc_bitmap_list_asprintf(&text, current.get());
    std::string kept = std::string("kept the process's own memory policy (") +
                       (policy == HWLOC_MEMBIND_BIND ? "bind" : policy == HWLOC_MEMBIND_INTERLEAVE ? "interleave" : "other") +
                       " on NUMA node(s) " + (text ? text : "?") + ")";
    std::free(text);
    return kept;
  }
  Bitmap wanted(hwloc_bitmap_alloc());
  for (int node : nodes) hwloc_bitmap_set(wanted.get(), static_cast<unsigned>(node));
  if (hwloc_set_membind(topology_, wanted.get(), HWLOC_MEMBIND_BIND,
                        HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) != 0) {
    return std::string("not bound: ") + std::strerror(errno);
  }
  return "bound";
}

std::vector<int> Topology::numa_nodes_of(const CpuSet& cpus) const {
  auto bitmap = to_bitmap(cpus);
  std::vector<int> nodes;
  const int depth = hwloc_get_type_or_below_depth(topology_, HWLOC_OBJ_CORE);
  for (unsigned i = 0; i < hwloc_get_nbobjs_by_depth(topology_, depth); ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_depth(topology_, depth, i);
    if (!hwloc_bitmap_intersects(core->cpuset, bitmap.get())) continue;
    const int node = home_node(topology_, core->cpuset);
    if (node >= 0 && std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

std::vector<CpuSet> Topology::nvidia_gpu_locality() const {
  constexpr unsigned kNvidia = 0x10de;
  std::vector<std::pair<std::string, CpuSet>> gpus;  // by PCI bus id
  hwloc_obj_t device = nullptr;
  while ((device = hwloc_get_next_pcidev(topology_, device)) != nullptr) {
    const auto& pci = device->attr->pcidev;
    const unsigned base_class = pci.class_id >> 8;  // 0x03: display controllers (VGA 0x0300, 3D 0x0302)
    if (pci.vendor_id != kNvidia || base_class != 0x03) continue;
    char busid[32];
    std::snprintf(busid, sizeof busid, "%08x:%02x:%02x.%x", pci.domain, pci.bus, pci.dev, pci.func);
    gpus.emplace_back(busid, to_cpu_set(hwloc_get_non_io_ancestor_obj(topology_, device)->cpuset));
  }
  std::sort(gpus.begin(), gpus.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<CpuSet> out;
  for (auto& gpu : gpus) out.push_back(std::move(gpu.second));
  return out;
}

}  // namespace superoffload::cluster
