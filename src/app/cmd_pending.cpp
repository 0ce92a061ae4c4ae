// eval, export, inspect and plugins: their command lines are final; their bodies are not
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
    std::string model, tokens, dump_logits, checkpoint, to, dtype = "bf16", max_shard_size = "5GB", path, config;
  };
  auto o = std::make_shared<Options>();

  auto* eval = app.add_subcommand("eval", "Mean loss and perplexity of a HuggingFace model on token sequences");
  eval->add_option("--model", o->model, "HuggingFace model directory")->required();
  eval->add_option("--tokens", o->tokens, "HDF5 file with an int64 [batch, seq] dataset `tokens`")->required();
  eval->add_option("--dump-logits", o->dump_logits, "Write fp32 logits and per-token loss to this HDF5 file");
  not_yet(eval, run, "it needs the model plugins and safetensors loading");

  auto* export_cmd = app.add_subcommand("export", "Write a checkpoint as a HuggingFace directory");
  export_cmd->add_option("checkpoint", o->checkpoint, "Checkpoint directory (step_XXXXXXXX or latest)")->required();
  export_cmd->add_option("--to", o->to, "Output HuggingFace directory")->required();
  export_cmd->add_option("--dtype", o->dtype, "bf16 or fp32")->check(CLI::IsMember({"bf16", "fp32"}));
  export_cmd->add_option("--max-shard-size", o->max_shard_size, "Largest safetensors shard, e.g. 5GB");
  not_yet(export_cmd, run, "it needs HDF5 checkpoints and the safetensors writer");

  auto* inspect = app.add_subcommand("inspect", "Summarise a metrics.h5 file or a checkpoint");
  inspect->add_option("path", o->path, "metrics.h5 or a checkpoint directory")->required();
  not_yet(inspect, run, "it needs the metrics file and checkpoint formats");

  auto* plugins = app.add_subcommand("plugins", "List model plugins: every file tried, what it handles, why refused");
  plugins->add_option("--config", o->config, "Configuration whose [model] plugin settings to use");
  not_yet(plugins, run, "it needs the model plugin loader");
}

}  // namespace superoffload::app
