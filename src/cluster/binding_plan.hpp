// Which cores each rank of a node gets: a pure function of the node's topology, the GPUs
// and the launcher's binding, so it is tested on synthetic topologies.
//
// Rules: a binding the user asked the launcher for (srun --cpu-bind, mpirun --bind-to) is kept;
// Open MPI's default binding (launcher_binding.hpp) is replaced. Otherwise, on GPU nodes a rank uses GPU (local_rank mod visible GPUs) and the cores near
// it; ranks wanting the same cores split them evenly in contiguous blocks. Without GPUs the
// node's cores are split evenly among its ranks.
#pragma once

#include <string>
#include <vector>

#include "cluster/cpu_set.hpp"

namespace superoffload::cluster {

struct Core {
  int numa_node = -1;  // OS index of the NUMA node holding it, -1 when unknown
  CpuSet pus;          // its hardware threads
};

enum class BindMode { automatic, none };
// superoffload: bound by us; launcher: the binding the user asked the launcher for, kept;
// launcher_widened: the launcher's default binding, replaced by ours; none: [runtime] bind = "none".
enum class BindingSource { superoffload, launcher, launcher_widened, none };
const char* to_string(BindingSource source);

struct BindingRequest {
  BindMode mode = BindMode::automatic;
  std::vector<Core> allowed_cores;  // the cores this process may use, in logical order
  CpuSet current;                   // the CPUs the process is bound to now
  bool launcher_default = false;    // `current` is the launcher's default, not what the user asked
  int local_rank = 0;
  int local_size = 1;
  int visible_gpus = 0;
  std::vector<CpuSet> gpu_locality;  // per visible GPU: the CPUs near it (empty if unknown)
};

// Phase one, local to the rank: the GPU it drives and the cores it will share with peers.
struct BindingIntent {
  BindingSource source = BindingSource::none;
  int gpu = -1;
  std::vector<int> candidate_cores;  // indices into allowed_cores
  std::vector<std::string> notes;    // reasons worth a log line
};
BindingIntent decide_binding(const BindingRequest& request);

// Phase two, once every local rank's intent is known: the contiguous, even share of
// `candidates` for peer `index` of `count`. With more peers than cores, peers share cores
// (peer i gets core floor(i * cores / peers)).
std::vector<int> share_of(const std::vector<int>& candidates, int index, int count);

// Both phases for every local rank of a node that nothing has bound yet (`base.local_rank` is
// ignored): the CPUs each rank would get, in local-rank order. bind_ranks does the same over
// MPI; `superoffload plan --topology` and the tests call this.
std::vector<CpuSet> plan_node(BindingRequest base);

// The CPUs of the given cores.
CpuSet cpus_of(const std::vector<Core>& cores, const std::vector<int>& indices);
// How many of `cores` have a hardware thread in `cpus`: the thread count a rank should use.
int cores_in(const std::vector<Core>& cores, const CpuSet& cpus);
// One CPU per core of `cores` that has hardware threads in `cpus`: the first of them, in core order.
std::vector<int> one_cpu_per_core(const std::vector<Core>& cores, const CpuSet& cpus);
// Where the CPU optimizer's threads run: the first floor(core_share * cores) of `core_cpus` (at
// least one). [offload] cpuadam_cores_perc counts cores, as DeepSpeed's does: on a node with
// two threads per core (x86 SMT) the optimizer gets one thread per core, not both threads of
// half as many cores, which would share one core's vector units.
std::vector<int> optimizer_cpus(const std::vector<int>& core_cpus, double core_share);

}  // namespace superoffload::cluster
