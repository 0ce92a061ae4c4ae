// Bring-up shared by the subcommands: logging, configuration (agreed on by all ranks),
// per-rank log files, binding and its table.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/logging.hpp"
#include "cluster/binding.hpp"
#include "config/load.hpp"

namespace superoffload::cluster {
class MpiWorld;
}

namespace superoffload::app {

// Options every subcommand that reads a configuration takes.
struct ConfigOptions {
  std::string config_file;  // may be empty when --deepspeed-config and --set give everything
  std::string deepspeed_config;
  std::vector<std::string> overrides;
};

struct GlobalOptions {
  std::string log_level;  // empty: from the configuration (or "info")
};

// Loads the configuration on every rank; a problem on any rank is reported once and ends
// the job with exit code 2 (usage error). Applies [logging] and logs DeepSpeed-import warnings.
config::LoadedConfig load_config_or_exit(const cluster::MpiWorld& world, const ConfigOptions& options,
                                         const GlobalOptions& globals, int world_size);

// What each node offers for cache and memory-bandwidth partitioning (resctrl), one line per
// node from its first rank, gathered on every rank (collective). `with_decision`: each mounted
// node's line also says what a training run of the node's ranks with the default [runtime]
// resctrl settings would do there (`version`; a training run logs what it did instead).
std::vector<std::string> resctrl_per_node(const cluster::MpiWorld& world, bool with_decision);
// For `plan` (this node only): what resctrl offers here, and what `runtime` would do with
// `ranks_per_node` ranks, with or without threads of the CPU optimizer.
std::vector<std::string> resctrl_plan_lines(const config::RuntimeConfig& runtime, int ranks_per_node,
                                            bool optimizer_threads);

// Binds the ranks ([runtime] bind) and returns the binding table for rank 0 to show.
cluster::BindingReport bind_and_report(const cluster::MpiWorld& world, const std::string& bind_mode);

}  // namespace superoffload::app
