// export_checkpoint.
#include "train/export_checkpoint.hpp"

#include <torch/autograd.h>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "io/checkpoint_files.hpp"
#include "cluster/compute_threads.hpp"
#include "io/checkpoint_reader.hpp"
#include "model_io/export_hf.hpp"
#include "model_io/load_model.hpp"
#include "model_io/safetensors.hpp"
#include "train/command_memory.hpp"

namespace superoffload::train {

namespace fs = std::filesystem;

// A step_* directory as given, else the checkpoint `which` names of an output directory or of
// its checkpoints/ folder: `best`, or the newest complete one.
fs::path find_checkpoint_to_export(const std::string& given, const std::string& which, MPI_Comm comm) {
  const fs::path path(given);
  SO_CHECK(fs::exists(path), "checkpoint " << given << " does not exist");
  if (io::step_of(path) || fs::exists(path / "DONE")) {
    const auto problem = io::checkpoint_problem(path, comm);
    SO_CHECK(problem.empty(), "cannot export " << given << ": " << problem);
    return path;
  }
  const fs::path root = fs::exists(path / "checkpoints") ? path / "checkpoints" : path;
  if (which == "best") {
    const auto best = io::read_best(root);
    if (best.empty()) {
      throw Error("no checkpoint is named best under " + root.string(),
                  "train with [checkpoint] keep_best = true and validation data ([data] eval_path or eval_fraction), "
                  "or export --checkpoint latest",
                  Error::UserInput{});
    }
    const auto problem = io::checkpoint_problem(best, comm);
    SO_CHECK(problem.empty(), "cannot export the best checkpoint " << best.string() << ": " << problem);
    return best;
  }
  std::vector<std::string> notes;
  const auto chosen = io::resolve_checkpoint(root, "latest", comm, notes);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    for (const auto& note : notes) SO_LOG(warning) << note;
  }
  SO_CHECK(!chosen.empty(), "no complete checkpoint under " << root.string());
  return chosen;
}

ExportedCheckpoint export_checkpoint(const fs::path& directory, const ExportRequest& request) {
  io::CheckpointReader reader(directory, cluster::compute_threads());
  const auto& saved = reader.manifest();
  const auto model_dir = request.model.empty() ? saved.at("model").at("path").get<std::string>() : request.model;
  SO_CHECK(fs::exists(fs::path(model_dir) / "config.json"),
           "the model directory " << model_dir << " (from " << (request.model.empty() ? "the manifest" : "--model")
                                  << ") has no config.json"
                                  << hint("pass --model with the HF directory the run trained"));
  // The model's structure only: parameters are allocated but not filled (deferred).
  auto loaded = model::load_model(model_dir, saved.at("model").value("plugin", std::string("auto")), config::InitMode::random, 0,
                                  /*defer=*/true);
  auto& layers = loaded.model->layers();
  SO_CHECK(layers.size() == reader.layers(),
           directory.string() << " has " << reader.layers() << " layers; " << model_dir << " builds " << layers.size());
  model::ExportOptions options{.dtype = request.dtype, .max_shard_bytes = model::parse_byte_size(request.max_shard_size)};
  int64_t largest = 0;
  for (const auto& layer : layers) {
    for (const auto& [name, tensor] : layer->hf_parameters()) largest = std::max(largest, tensor.numel());
  }
  const auto plan = plan_export_memory(largest, request.dtype == "bf16" ? 2 : 4, cluster::compute_threads());
  check_command_memory(plan, 1);
  // Tensor by tensor: each is read from the checkpoint into the exporter's buffer just before
  // it is written (the model's own parameters, allocated but never touched, hold no memory).
  options.values = [&](size_t l, size_t p, at::Tensor& into) {
    const auto& slots = saved.at("layers").at(l).at("parameters");
    if (p == 0) {
      size_t i = 0;
      for (const auto& [name, tensor] : layers[l]->hf_parameters()) {
        SO_CHECK(i < slots.size() && slots[i].at("name").get<std::string>() == name &&
                     slots[i].at("numel").get<int64_t>() == tensor.numel(),
                 directory.string() << ": layer " << l << " does not match " << model_dir << " at parameter " << name);
        ++i;
      }
      SO_CHECK(i == slots.size(), directory.string() << ": layer " << l << " has " << slots.size()
                                                     << " parameters there and " << i << " in " << model_dir);
    }
    reader.read(l, "master", slots[p].at("offset").get<int64_t>(), into.numel(), into.data_ptr<float>());
  };
  model::export_hf(*loaded.model, model_dir, request.to, options);
  log_command_memory(plan);
  return {.step = reader.step(), .world_size = reader.world_size()};
}

}  // namespace superoffload::train
