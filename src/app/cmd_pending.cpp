// export and inspect: their command lines are final; their bodies are not
// built yet, and each says so plainly and exits with status 3.
#include <iostream>

#include "app/commands.hpp"
#include "runtime/mpi_world.hpp"

namespace superoffload::app {
namespace {

void not_yet(CLI::App* command, Run& run, const char* needs) {
  const std::string name = command->get_name();
  const std::string what = needs;
  command->callback([&run, name, what] {
    run = [name, what](const runtime::MpiWorld& world) {
      if (world.rank() == 0) {
        std::cerr << "superoffload " << name << ": not implemented yet — " << what << "\n";
      }
      return 3;
    };
  });
}

}  // namespace

void add_pending_commands(CLI::App& app, const GlobalOptions& /*globals*/, Run& run) {
  struct Options {
    std::string checkpoint, to, dtype = "bf16", max_shard_size = "5GB", path;
  };
  auto o = std::make_shared<Options>();

  auto* export_cmd = app.add_subcommand("export", "Write a checkpoint as a HuggingFace directory");
  export_cmd->add_option("checkpoint", o->checkpoint, "Checkpoint directory (step_XXXXXXXX or latest)")->required();
  export_cmd->add_option("--to", o->to, "Output HuggingFace directory")->required();
  export_cmd->add_option("--dtype", o->dtype, "bf16 or fp32")->check(CLI::IsMember({"bf16", "fp32"}));
  export_cmd->add_option("--max-shard-size", o->max_shard_size, "Largest safetensors shard, e.g. 5GB");
  not_yet(export_cmd, run, "it needs the HDF5 checkpoints of the training run");

  auto* inspect = app.add_subcommand("inspect", "Summarise a metrics.h5 file or a checkpoint");
  inspect->add_option("path", o->path, "metrics.h5 or a checkpoint directory")->required();
  not_yet(inspect, run, "it needs the metrics file and checkpoint formats");

}

}  // namespace superoffload::app
