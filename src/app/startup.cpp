// Subcommand bring-up.
#include "app/startup.hpp"

#include "cluster/job_exit.hpp"
#include "cluster/mpi_world.hpp"
#include "resctrl/decision.hpp"
#include "resctrl/resctrl.hpp"
#include "train/cache_partition.hpp"

namespace superoffload::app {
namespace {

log::Level log_level(config::LogLevel level) {
  switch (level) {
    case config::LogLevel::trace: return log::Level::trace;
    case config::LogLevel::debug: return log::Level::debug;
    case config::LogLevel::info: return log::Level::info;
    case config::LogLevel::warning: return log::Level::warning;
    case config::LogLevel::error: return log::Level::error;
  }
  return log::Level::info;
}

}  // namespace

config::LoadedConfig load_config_or_exit(const cluster::MpiWorld& world, const ConfigOptions& options,
                                         const GlobalOptions& globals, int world_size) {
  config::ConfigSources sources;
  if (!options.config_file.empty()) sources.toml_file = options.config_file;
  if (!options.deepspeed_config.empty()) sources.deepspeed_json = options.deepspeed_config;
  sources.overrides = options.overrides;

  config::LoadedConfig loaded;
  std::exception_ptr error;
  try {
    loaded = config::load_config(sources, world_size);
  } catch (...) {
    error = std::current_exception();
  }
  cluster::exit_if_any_rank_failed(world, error, 2);

  const auto& logging = loaded.config.logging;
  if (globals.log_level.empty()) log::set_level(log_level(logging.level));
  log::set_rank(world.rank(), logging.console == config::ConsoleMode::all ? log::Console::all : log::Console::rank0);
  for (const auto& note : loaded.notes) SO_LOG(info) << "DeepSpeed config: " << note;
  for (const auto& warning : loaded.warnings) SO_LOG(warning) << warning;
  return loaded;
}

cluster::BindingReport bind_and_report(const cluster::MpiWorld& world, const std::string& bind_mode) {
  const auto mode = bind_mode == "none" ? cluster::BindMode::none : cluster::BindMode::automatic;
  const auto binding = cluster::bind_ranks(world, mode);
  // Without a configuration, the default share of the CPU optimizer.
  return cluster::report_bindings(world, binding, config::OffloadConfig{}.cpuadam_cores_perc);
}

std::vector<std::string> resctrl_per_node(const cluster::MpiWorld& world, bool with_decision) {
  std::string mine;
  if (world.local_rank() == 0) {
    const auto tree = resctrl::detect(train::resctrl_mount_table());
    mine = "node " + std::to_string(world.node_index()) + " (" + world.host() + "): " + resctrl::describe(tree);
    if (with_decision && tree.mounted()) {
      mine += "\n  a training run of " + std::to_string(world.local_size()) + " rank(s) here " +
              resctrl::describe(train::decide_resctrl(tree, config::RuntimeConfig{}, world.local_size(), {}, true));
    }
  }
  return cluster::MpiWorld::allgather_lines(mine, world.world());
}

std::vector<std::string> resctrl_plan_lines(const config::RuntimeConfig& runtime, int ranks_per_node,
                                            bool optimizer_threads) {
  const auto tree = resctrl::detect(train::resctrl_mount_table());
  std::vector<std::string> lines{"resctrl on this node: " + resctrl::describe(tree)};
  if (tree.mounted()) {
    lines.push_back("  with " + std::to_string(ranks_per_node) + " rank(s) per node like this one, the run " +
                    resctrl::describe(train::decide_resctrl(tree, runtime, ranks_per_node, {}, optimizer_threads)));
  }
  return lines;
}

}  // namespace superoffload::app
