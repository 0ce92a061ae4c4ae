// Whether the CPU binding a rank starts with was asked for by the user or is a launcher's
// default. Open MPI binds each rank to one core when it starts 1 or 2 ranks, and to a socket
// above that, unless told otherwise: on a GH200 node `mpirun -np 1` would leave the CPU
// optimizer one of 72 Grace cores. A binding the user asked for is kept; Open MPI's default is
// replaced by superoffload's own (the rank's share of the NUMA node nearest its GPU, as
// DeepSpeed's --bind_cores_to_rank does).
//
// What is visible to a rank (Open MPI 4.1, measured): mpirun exports
// OMPI_MCA_orte_bound_at_launch=1 whenever it bound the rank, and the binding options as MCA
// parameters: --bind-to X → OMPI_MCA_hwloc_base_binding_policy=X (also --mca or an exported
// OMPI_MCA_ variable), --cpu-set → OMPI_MCA_hwloc_base_cpu_set, --map-by OBJ:PE=N →
// OMPI_MCA_rmaps_base_mapping_policy with "PE=", --rankfile → OMPI_MCA_orte_rankfile (its
// newer name rmaps_rank_file_path is read too).
// A policy set in an MCA parameter file (/etc/openmpi/openmpi-mca-params.conf,
// ~/.openmpi/mca-params.conf) is not exported, so those files are read too. Slurm's srun binds
// as --cpu-bind and --cpus-per-task ask (SLURM_CPU_BIND*, SLURM_CPUS_PER_TASK): always kept.
// Anything else that restricted the process (taskset, numactl, a cgroup) is kept as asked.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace superoffload::cluster {

struct LauncherBinding {
  enum class Kind {
    asked,     // the user's: kept
    defaulted  // Open MPI's default: replaced by superoffload's binding
  };
  Kind kind = Kind::asked;
  // How the binding came about, for messages: "mpirun --bind-to core", "srun --cpus-per-task=4",
  // "Open MPI's default (1 core per rank for 1-2 ranks)", "the process's CPU affinity
  // (taskset, numactl or the launcher)".
  std::string how;
};

// `env` looks up an environment variable; `mca_param_files` are the texts of the Open MPI MCA
// parameter files that apply. Call only for a rank that is bound to fewer CPUs than allowed.
LauncherBinding classify_launcher_binding(const std::function<std::optional<std::string>(const std::string&)>& env,
                                          const std::vector<std::string>& mca_param_files);

// The same for this process: its environment and the MCA parameter files Open MPI reads.
LauncherBinding this_process_launcher_binding();

}  // namespace superoffload::cluster
