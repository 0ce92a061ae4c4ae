// `superoffload plan CONFIG --nodes N --gpus-per-node G`: the memory a run of CONFIG needs per
// GPU and per node (host), for a cluster shape the user may not have yet; with
// --gpu-memory / --host-memory it also says whether that fits. Reads config.json only.
#include <iostream>

#include "app/commands.hpp"
#include "cluster/mpi_world.hpp"
#include "train/memory_plan.hpp"

namespace superoffload::app {

void add_plan_command(CLI::App& app, const GlobalOptions& globals, Run& run) {
  struct Options {
    ConfigOptions config;
    int nodes = 1, gpus_per_node = 1;
    double gpu_memory_gb = 0, host_memory_gb = 0;
    bool cpu = false;
  };
  auto o = std::make_shared<Options>();
  auto* command = app.add_subcommand("plan", "Estimate the memory a configuration needs on a cluster shape");
  add_config_options(*command, o->config, true);
  command->add_option("--nodes", o->nodes, "Nodes")->check(CLI::PositiveNumber);
  command->add_option("--gpus-per-node", o->gpus_per_node, "GPUs (ranks) per node")->check(CLI::PositiveNumber);
  command->add_option("--gpu-memory", o->gpu_memory_gb, "Memory per GPU in GB, e.g. 96 for a GH200 (optional)");
  command->add_option("--host-memory", o->host_memory_gb, "Host memory per node in GB (optional)");
  command->add_flag("--cpu", o->cpu, "Ranks without GPUs (everything in host memory)");
  command->callback([&run, &globals, o] {
    run = [&globals, o](const cluster::MpiWorld& world) {
      const int ranks = o->nodes * o->gpus_per_node;
      const auto loaded = load_config_or_exit(world, o->config, globals, ranks);
      if (world.rank() != 0) return 0;
      const auto size = train::model_size_from_config(loaded.config.model.path);
      const auto plan = train::plan_memory(size, loaded.config, ranks, !o->cpu);
      for (const auto& line : train::describe_plan(size, plan, o->gpus_per_node, o->gpu_memory_gb * 1e9,
                                                   o->host_memory_gb * 1e9)) {
        std::cout << line << "\n";
      }
      bool fits = true;
      if (o->gpu_memory_gb > 0 && !o->cpu) fits = fits && plan.device_total() <= train::kPlanHeadroom * o->gpu_memory_gb * 1e9;
      if (o->host_memory_gb > 0) fits = fits && plan.host_total() * o->gpus_per_node <= train::kPlanHeadroom * o->host_memory_gb * 1e9;
      if (o->gpu_memory_gb > 0 || o->host_memory_gb > 0) {
        std::cout << (fits ? "fits" : "does not fit") << " (with 5% headroom)\n";
      }
      return fits ? 0 : 1;
    };
  });
}

}  // namespace superoffload::app
