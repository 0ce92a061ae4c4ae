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
  std::vector<int> numa_nodes;  // NUMA nodes of those CPUs
  int gpu = -1;                 // CUDA device index, -1 without GPUs
  std::string gpu_name;
  int threads = 1;              // LibTorch / OpenMP threads
};

// Collective over the world: every rank must call it.
RankBinding bind_ranks(const MpiWorld& world, BindMode mode);

// Collective over the world. Every rank's binding as a table (header + one row per rank,
// in rank order), plus a warning line per node where ranks share CPUs.
struct BindingReport {
  std::vector<std::string> table;
  std::vector<std::string> warnings;
};
BindingReport report_bindings(const MpiWorld& world, const RankBinding& mine);

}  // namespace superoffload::cluster
