// `superoffload train CONFIG`: validates the configuration, brings up logging (every rank's
// file under <output_dir>/logs), binding and the engine, and runs the training loop.
#include <filesystem>

#include "app/commands.hpp"
#include "base/startup_timeline.hpp"
#include "base/error.hpp"
#include "cluster/mpi_world.hpp"
#include "cluster/stop_request.hpp"
#include "train/run_directory.hpp"
#include "train/trainer.hpp"

namespace superoffload::app {

void add_train_command(CLI::App& app, const GlobalOptions& globals, Run& run) {
  auto* command = app.add_subcommand("train", "Train a model from a configuration");
  struct Options {
    ConfigOptions config;
    std::string resume;
  };
  auto options = std::make_shared<Options>();
  add_config_options(*command, options->config, false);
  auto* resume = command->add_option("--resume", options->resume, "Resume from a checkpoint: latest (default) or a path")
                     ->expected(0, 1)
                     ->default_str("latest");
  command->callback([&run, &globals, options, resume] {
    const bool resume_requested = resume->count() > 0;
    if (resume_requested && options->resume.empty()) options->resume = "latest";
    run = [&globals, options, resume_requested](const cluster::MpiWorld& world) {
      auto& timeline = base::StartupTimeline::instance();
      timeline.mark("process and MPI start-up");
      cluster::install_stop_handlers();
      const auto loaded = load_config_or_exit(world, options->config, globals, world.size());
      const auto& cfg = loaded.config;
      // Before anything is written there: writable on every rank, and this job's alone.
      const train::RunDirectory run_directory(cfg.training.output_dir, world);
      log::add_rank_file(std::filesystem::path(cfg.training.output_dir) / "logs", world.rank());
      timeline.mark("configuration and run directory");
      const auto binding = cluster::bind_ranks(world, cfg.runtime.bind == config::BindMode::none ? cluster::BindMode::none
                                                                                   : cluster::BindMode::automatic);
      // No CPU optimizer with [offload] device = "none": no core share to fall short of.
      const auto report = cluster::report_bindings(
          world, binding, cfg.offload.device == config::OffloadDevice::none ? 0.0 : cfg.offload.cpuadam_cores_perc);
      const auto resctrl = resctrl_per_node(world, /*with_decision=*/false);
      if (world.rank() == 0) {
        SO_LOG(info) << "superoffload train: " << world.size() << " rank(s) on " << world.node_count() << " node(s)";
        for (const auto& line : report.table) SO_LOG(info) << line;
        for (const auto& warning : report.warnings) SO_LOG(warning) << warning;
        for (const auto& line : resctrl) SO_LOG(info) << line;
      }
      timeline.mark("binding");
      const auto summary = train::run_training(cfg, world, binding, report.table,
                                               resume_requested ? options->resume : std::string());
      // Preempted after a checkpoint: a distinct code the jobscripts answer with a requeue.
      return summary.stop_signal != 0 ? cluster::kExitPreempted : 0;
    };
  });
}

}  // namespace superoffload::app
