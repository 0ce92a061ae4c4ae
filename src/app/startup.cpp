// Subcommand bring-up.
#include "app/startup.hpp"

#include "cluster/job_exit.hpp"
#include "cluster/mpi_world.hpp"
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

std::vector<std::string> resctrl_per_node(const cluster::MpiWorld& world) {
  const std::string mine = world.local_rank() == 0 ? "node " + std::to_string(world.node_index()) + " (" + world.host() +
                                                         "): " + resctrl::describe(resctrl::detect(train::resctrl_mount_table()))
                                                   : "";
  std::vector<std::string> lines;
  for (auto& line : cluster::MpiWorld::allgather(mine, world.world())) {
    if (!line.empty()) lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace superoffload::app
