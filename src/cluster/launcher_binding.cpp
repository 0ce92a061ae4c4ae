// classify_launcher_binding: the environment variables of Open MPI 4.1 and Slurm that tell a
// binding the user asked for from a launcher's default.
#include "cluster/launcher_binding.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace superoffload::cluster {
namespace {

// The value of `name` in an MCA parameter file ("name = value" lines, '#' comments).
std::optional<std::string> mca_file_value(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  std::optional<std::string> value;
  for (std::string line; std::getline(lines, line);) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto trim = [](std::string s) {
      const auto begin = s.find_first_not_of(" \t\r");
      const auto end = s.find_last_not_of(" \t\r");
      return begin == std::string::npos ? std::string() : s.substr(begin, end - begin + 1);
    };
    if (trim(line.substr(0, eq)) == name) value = trim(line.substr(eq + 1));  // the last one wins
  }
  return value;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

LauncherBinding classify_launcher_binding(const std::function<std::optional<std::string>(const std::string&)>& env,
                                          const std::vector<std::string>& mca_param_files) {
  using Kind = LauncherBinding::Kind;
  // Open MPI's mpirun (its daemons export orte_launch, also inside a Slurm allocation):
  // explicit binding options reach the ranks as MCA parameters.
  if (env("OMPI_MCA_orte_launch")) {
    if (const auto policy = env("OMPI_MCA_hwloc_base_binding_policy")) return {Kind::asked, "mpirun --bind-to " + *policy};
    if (const auto cpus = env("OMPI_MCA_hwloc_base_cpu_set")) return {Kind::asked, "mpirun --cpu-set " + *cpus};
    for (const char* name : {"OMPI_MCA_orte_rankfile", "OMPI_MCA_rmaps_rank_file_path"}) {
      if (const auto rankfile = env(name)) return {Kind::asked, "mpirun --rankfile " + *rankfile};
    }
    if (const auto mapping = env("OMPI_MCA_rmaps_base_mapping_policy");
        mapping && mapping->find("PE=") != std::string::npos) {
      return {Kind::asked, "mpirun --map-by " + *mapping};
    }
    for (const auto& text : mca_param_files) {
      if (const auto policy = mca_file_value(text, "hwloc_base_binding_policy")) {
        return {Kind::asked, "hwloc_base_binding_policy = " + *policy + " in an Open MPI MCA parameter file"};
      }
    }
    if (env("OMPI_MCA_orte_bound_at_launch") == std::optional<std::string>("1")) {
      return {Kind::defaulted, "Open MPI's default binding (one core per rank for 1-2 ranks, a socket above)"};
    }
  }
  // Slurm's srun binds as --cpu-bind asks (exported as SLURM_CPU_BIND) or, by default, to the
  // CPUs of the task's allocation (--cpus-per-task).
  if (env("SLURM_STEP_ID")) {
    if (const auto bind = env("SLURM_CPU_BIND"); bind && !bind->empty()) return {Kind::asked, "srun --cpu-bind=" + *bind};
    if (const auto per_task = env("SLURM_CPUS_PER_TASK")) return {Kind::asked, "srun --cpus-per-task=" + *per_task};
    return {Kind::asked, "srun"};
  }
  return {Kind::asked, "the process's CPU affinity (taskset, numactl or the launcher)"};
}

LauncherBinding this_process_launcher_binding() {
  auto env = [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    return value ? std::optional<std::string>(value) : std::nullopt;
  };
  // Open MPI's system-wide file (Debian's path and the install prefix's), then the user's.
  std::vector<std::string> files;
  std::vector<std::string> paths = {"/etc/openmpi/openmpi-mca-params.conf"};
  if (const auto prefix = env("OPAL_PREFIX")) paths.push_back(*prefix + "/etc/openmpi-mca-params.conf");
  if (const auto home = env("HOME")) paths.push_back(*home + "/.openmpi/mca-params.conf");
  for (const auto& path : paths) files.push_back(read_file(path));
  return classify_launcher_binding(env, files);
}

}  // namespace superoffload::cluster
