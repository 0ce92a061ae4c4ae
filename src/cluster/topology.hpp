// The node's hardware topology through hwloc: allowed cores with their NUMA nodes, the
// current CPU binding, and binding the process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cluster/binding_plan.hpp"

struct hwloc_topology;

namespace superoffload::cluster {

class Topology {
 public:
  // This machine, restricted to what the process may use (cgroups, Slurm allocation).
  static Topology this_machine();
  // A synthetic topology, e.g. "package:2 numa:1 core:4 pu:2" (tests).
  static Topology synthetic(const std::string& description);
  // A topology saved as hwloc XML (lstopo --of xml, or tests/cluster/topologies), with its PCI
  // devices: another node's shape, to plan bindings for it.
  static Topology from_xml(const std::string& path);
  ~Topology();
  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;

  std::vector<Core> allowed_cores() const;
  // The CPUs the whole process is bound to now.
  CpuSet current_binding() const;
  // Binds the whole process (all its threads, and those it creates) to `cpus`.
  void bind_process(const CpuSet& cpus) const;
  // Binds the future memory allocations of this thread and of the threads it starts afterwards
  // to the NUMA nodes `nodes` (OS indices), as
  // `srun --mem-bind=local` or `numactl --membind` would, unless it already has a memory policy
  // of its own (the launcher's or numactl's, kept). Returns what happened, for the log: "bound",
  // "kept <policy>", or why it could not (never throws: the first-touch default stays).
  std::string bind_memory(const std::vector<int>& nodes) const;
  // OS indices of the home NUMA nodes (see Core::numa_node) of the cores in `cpus`: the memory
  // those CPUs are local to. A GPU's memory node is never one, though on a GH200 it has the
  // same CPU set as the Grace node.
  std::vector<int> numa_nodes_of(const CpuSet& cpus) const;
  // The CPUs near each NVIDIA GPU among the topology's PCI devices, in PCI bus order (CUDA's
  // order under CUDA_DEVICE_ORDER=PCI_BUS_ID); empty when the topology has no I/O objects.
  std::vector<CpuSet> nvidia_gpu_locality() const;
  hwloc_topology* raw() const { return topology_; }

 private:
  explicit Topology(hwloc_topology* topology) : topology_(topology) {}
  hwloc_topology* topology_ = nullptr;
};

}  // namespace superoffload::cluster
