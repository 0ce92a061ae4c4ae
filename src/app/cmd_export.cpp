// `superoffload export CHECKPOINT --to HF_DIR`: writes the fp32 master weights of a checkpoint
// (written at any world size) as a HuggingFace directory — sharded safetensors, index,
// config.json and the tokenizer files of the model the run trained — reading one layer at a
// time from the rank files, so memory holds at most one layer.
#include <torch/torch.h>

#include <filesystem>

#include "app/commands.hpp"
#include "io/checkpoint_files.hpp"
#include "io/checkpoint_reader.hpp"
#include "model_io/export_hf.hpp"
#include "model_io/load_model.hpp"
#include "model_io/safetensors.hpp"
#include "base/error.hpp"
#include "base/logging.hpp"
#include "cluster/mpi_world.hpp"
#include "base/timer.hpp"

namespace superoffload::app {
namespace {

namespace fs = std::filesystem;

// A step_* directory as given, else the newest complete checkpoint of an output directory
// or of its checkpoints/ folder.
fs::path choose_checkpoint(const std::string& given, const runtime::MpiWorld& world) {
  const fs::path path(given);
  SO_CHECK(fs::exists(path), "checkpoint " << given << " does not exist");
  if (io::step_of(path) || fs::exists(path / "DONE")) {
    const auto problem = io::checkpoint_problem(path, world.world());
    SO_CHECK(problem.empty(), "cannot export " << given << ": " << problem);
    return path;
  }
  const fs::path root = fs::exists(path / "checkpoints") ? path / "checkpoints" : path;
  std::vector<std::string> notes;
  const auto chosen = io::resolve_checkpoint(root, "latest", world.world(), notes);
  if (world.rank() == 0) {
    for (const auto& note : notes) SO_LOG(warning) << note;
  }
  SO_CHECK(!chosen.empty(), "no complete checkpoint under " << root.string());
  return chosen;
}

}  // namespace

void add_export_command(CLI::App& app, const GlobalOptions& /*globals*/, Run& run) {
  struct Options {
    std::string checkpoint, to, dtype = "bf16", max_shard_size = "5GB", model;
  };
  auto o = std::make_shared<Options>();
  auto* command = app.add_subcommand("export", "Write a checkpoint as a HuggingFace directory");
  command->add_option("checkpoint", o->checkpoint, "step_XXXXXXXX directory, or a run's output directory (its latest)")
      ->required();
  command->add_option("--to", o->to, "Output HuggingFace directory")->required();
  command->add_option("--dtype", o->dtype, "bf16 or fp32")->check(CLI::IsMember({"bf16", "fp32"}));
  command->add_option("--max-shard-size", o->max_shard_size, "Largest safetensors shard, e.g. 5GB");
  command->add_option("--model", o->model,
                      "The HF model directory the run trained (config.json, tokenizer); default: the manifest's");
  command->callback([&run, o] {
    run = [o](const runtime::MpiWorld& world) {
      const auto directory = choose_checkpoint(o->checkpoint, world);
      if (world.rank() != 0) return 0;  // the export itself is serial
      const double start_s = runtime::now_s();
      io::CheckpointReader reader(directory);
      const auto& saved = reader.manifest();
      const auto model_dir = o->model.empty() ? saved.at("model").at("path").get<std::string>() : o->model;
      SO_CHECK(fs::exists(fs::path(model_dir) / "config.json"),
               "the model directory " << model_dir << " (from " << (o->model.empty() ? "the manifest" : "--model")
                                      << ") has no config.json"
                                      << hint("pass --model with the HF directory the run trained"));
      // The model's structure only: parameters are allocated but not filled (deferred).
      auto loaded = model::load_model(model_dir, saved.at("model").value("plugin", std::string("auto")), config::InitMode::random, 0,
                                      /*defer=*/true);
      auto& layers = loaded.model->layers();
      SO_CHECK(layers.size() == reader.layers(),
               directory.string() << " has " << reader.layers() << " layers; " << model_dir << " builds " << layers.size());
      model::ExportOptions options{o->dtype, model::parse_byte_size(o->max_shard_size), {}, {}};
      options.before_layer = [&](size_t l) {
        torch::NoGradGuard no_grad;
        const auto& slots = saved.at("layers").at(l).at("parameters");
        size_t p = 0;
        for (auto& [name, tensor] : layers[l]->hf_parameters()) {
          SO_CHECK(p < slots.size() && slots[p].at("name").get<std::string>() == name &&
                       slots[p].at("numel").get<int64_t>() == tensor.numel(),
                   directory.string() << ": layer " << l << " does not match " << model_dir << " at parameter " << name);
          auto values = at::empty({tensor.numel()}, at::kFloat);
          reader.read(l, "master", slots[p].at("offset").get<int64_t>(), tensor.numel(), values.data_ptr<float>());
          tensor.detach().copy_(values.view(tensor.sizes()));
          ++p;
        }
      };
      options.after_layer = [&](size_t l) {
        for (auto& parameter : layers[l]->parameters()) parameter.set_data(at::empty({0}, parameter.options()));
      };
      model::export_hf(*loaded.model, model_dir, o->to, options);
      SO_LOG(info) << "exported " << directory.string() << " (step " << reader.step() << ", written by "
                   << reader.world_size() << " rank(s)) to " << o->to << " as " << o->dtype << " in "
                   << runtime::now_s() - start_s << " s";
      return 0;
    };
  });
}

}  // namespace superoffload::app
