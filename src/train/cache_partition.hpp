// The training run's resctrl partition ([runtime] resctrl, the README, Cache and memory bandwidth (resctrl)): each node's
// decision (resctrl/decision.hpp), the groups made or adopted, the optimizer's threads moved
// into theirs and every other thread into the rest's, the counters sampled each step, and the
// groups removed when the run ends on any path (resctrl/partition.hpp).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "resctrl/decision.hpp"
#include "resctrl/monitor.hpp"
#include "resctrl/partition.hpp"

namespace superoffload::cluster {
class MpiWorld;
}

namespace superoffload::train {

// Where the tree is looked for: the mount table of this process, or the file that
// SUPEROFFLOAD_RESCTRL_MOUNTS names (tests, and nodes whose resctrl is mounted for the job
// somewhere this process's mount table does not show).
std::string resctrl_mount_table();

// What [runtime] resctrl decides on `tree` for `ranks_on_node` ranks in this job (Slurm's job
// id from the environment): the run's own decision, and what `version` and `plan` report.
resctrl::Decision decide_resctrl(const resctrl::Resctrl& tree, const config::RuntimeConfig& runtime, int ranks_on_node,
                                 const std::vector<int>& cache_ids, bool optimizer_threads);

class CachePartition {
 public:
  // Collective over the world. With resctrl = "required", a rank that cannot partition ends
  // the job (every rank exits with the first failing rank's reason); with "auto" it trains
  // unpartitioned and says why.
  CachePartition(const config::RuntimeConfig& runtime, const cluster::MpiWorld& world, const std::vector<int>& cpus,
                 const std::vector<pid_t>& optimizer_threads);
  // One line per node (rank 0 logs them): what the node's ranks did, and why.
  const std::vector<std::string>& lines() const { return lines_; }

  // This rank's groups since the last sample; NaN where this rank does not monitor (no
  // counters, or another rank of the node monitors the node's shared groups).
  struct Sample {
    double optimizer_gb_per_s, rest_gb_per_s;
    double optimizer_cache_bytes, rest_cache_bytes;
  };
  Sample sample();
  // The optimizer's bandwidth cap this run wrote, in percent of its domain (100: none; -1:
  // none written), for the step line.
  int optimizer_bandwidth_cap_percent() const { return cap_percent_; }

 private:
  std::optional<resctrl::Partition> partition_;
  resctrl::BandwidthMeter optimizer_meter_, rest_meter_;
  std::vector<std::string> lines_;
  int cap_percent_ = -1;
};

}  // namespace superoffload::train
