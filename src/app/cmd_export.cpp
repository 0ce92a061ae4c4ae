// `superoffload export CHECKPOINT --to HF_DIR`: a checkpoint as a HuggingFace directory
// (train/export_checkpoint.hpp).
#include "app/commands.hpp"
#include "base/logging.hpp"
#include "base/timer.hpp"
#include "cluster/mpi_world.hpp"
#include "train/export_checkpoint.hpp"

namespace superoffload::app {

void add_export_command(CLI::App& app, const GlobalOptions& /*globals*/, Run& run) {
  auto o = std::make_shared<train::ExportRequest>();
  auto* command = app.add_subcommand("export", "Write a checkpoint as a HuggingFace directory");
  command->add_option("checkpoint", o->checkpoint,
                      "step_XXXXXXXX directory, or a run's output directory (the checkpoint --checkpoint names)")
      ->required();
  command->add_option("--checkpoint", o->which,
                      "Of a run's output directory: latest (default) or best (the lowest eval loss, [checkpoint] keep_best)")
      ->check(CLI::IsMember({"latest", "best"}));
  command->add_option("--to", o->to, "Output HuggingFace directory")->required();
  command->add_option("--dtype", o->dtype, "bf16 or fp32")->check(CLI::IsMember({"bf16", "fp32"}));
  command->add_option("--max-shard-size", o->max_shard_size, "Largest safetensors shard, e.g. 5GB");
  command->add_option("--model", o->model,
                      "The HF model directory the run trained (config.json, tokenizer); default: the manifest's");
  command->callback([&run, o] {
    run = [o](const cluster::MpiWorld& world) {
      const auto directory = train::find_checkpoint_to_export(o->checkpoint, o->which, world.world());
      if (world.rank() != 0) return 0;  // the export itself is serial
      const double start_s = base::now_s();
      const auto exported = train::export_checkpoint(directory, *o);
      SO_LOG(info) << "exported " << directory.string() << " (step " << exported.step << ", written by "
                   << exported.world_size << " rank(s)) to " << o->to << " as " << o->dtype << " in "
                   << base::now_s() - start_s << " s";
      return 0;
    };
  });
}

}  // namespace superoffload::app
