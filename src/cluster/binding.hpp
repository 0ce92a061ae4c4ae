// Binds every rank to its cores (and picks its GPU) at start-up, sets the compute thread
// counts to match, and reports the binding of all ranks as a table.
#pragma once

#include <string>
#include <vector>

#include "cluster/binding_plan.hpp"
#include "cluster/cpu_set.hpp"

namespace superoffload::cluster {

class MpiWorld;

struct RankBinding {
  BindingSource source = BindingSource::none;
  CpuSet cpus;                  // where the rank runs
  std::vector<int> core_cpus;   // one CPU of each core in `cpus` (one_cpu_per_core): where the optimizer's threads go
  std::vector<int> numa_nodes;  // NUMA nodes of those CPUs: where its memory is bound (never a CPU-less HBM node)
  int gpu = -1;                 // CUDA device index, -1 without GPUs
  std::string gpu_name;
  int threads = 1;              // LibTorch / OpenMP threads
  // A binding kept or replaced from the launcher: how it came about (launcher_binding.hpp).
  std::string launcher_how;
  // The share of cores superoffload gives (or, under a kept launcher binding, would give) this
  // rank: its even part of the NUMA node(s) nearest its GPU, and the cores of those nodes.
  int share_cores = 0;
  std::vector<int> share_numa_nodes;
  int share_numa_cores = 0;
};

// Collective over the world: every rank must call it.
RankBinding bind_ranks(const MpiWorld& world, BindMode mode);

// Collective over the world. Every rank's binding as a table (header + one row per rank,
// in rank order), plus a warning line per node where ranks share CPUs, and one when a binding
// the user asked for leaves ranks fewer cores than `optimizer_core_share` ([offload]
// cpuadam_cores_perc) of their NUMA share.
struct BindingReport {
  std::vector<std::string> table;
  std::vector<std::string> warnings;
};
BindingReport report_bindings(const MpiWorld& world, const RankBinding& mine, double optimizer_core_share);

}  // namespace superoffload::cluster
