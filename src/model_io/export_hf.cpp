// HF export.
#include "model_io/export_hf.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "io/checkpoint_files.hpp"
#include "model_io/safetensors.hpp"
#include "model_io/weights.hpp"

namespace superoffload::model {
namespace {

// Files a HF model directory carries besides config.json and weights.
constexpr const char* kSideFiles[] = {"tokenizer.json",         "tokenizer_config.json", "special_tokens_map.json",
                                      "tokenizer.model",        "vocab.json",            "merges.txt",
                                      "added_tokens.json",      "generation_config.json", "chat_template.jinja"};

}  // namespace

void export_hf(const CausalLM& model, const std::string& source_dir, const std::string& directory,
               const ExportOptions& options) {
  namespace fs = std::filesystem;
  SO_CHECK(options.dtype == "bf16" || options.dtype == "fp32",
           "export dtype must be bf16 or fp32, not \"" << options.dtype << "\"");
  const auto dtype = options.dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  fs::create_directories(directory);
  // Old weights must not mix with the new ones.
  for (const auto& entry : fs::directory_iterator(directory)) {
    const auto name = entry.path().filename().string();
    if (name.ends_with(".safetensors") || name == "model.safetensors.index.json") fs::remove(entry.path());
  }

  // Every tensor's name and shape first: each shard's header is written before its data.
  std::vector<TensorToWrite> plan;
  int64_t largest = 0;
  for (const auto& layer : model.layers()) {
    for (const auto& [name, parameter] : layer->hf_parameters()) {
      plan.push_back({name, dtype_of(dtype), parameter.sizes().vec()});
      largest = std::max(largest, parameter.numel());
    }
  }
  ShardedSafetensorsWriter writer(directory, options.max_shard_bytes, plan);
  // One buffer of the largest tensor's size for the values read, one for their conversion,
  // reused for every tensor: a buffer per tensor, freed after it is written, leaves glibc's heap
  // holding the freed pages between the model's (untouched) parameters — an export of a 101M
  // model then peaked 126 MiB above the tiny model's instead of 3.
  const auto read_buffer = options.values ? at::empty({largest}, at::kFloat) : at::Tensor();
  const auto converted_buffer = at::empty({largest}, at::TensorOptions().dtype(dtype));  // untouched unless used
  for (size_t i = 0; i < model.layers().size(); ++i) {
    size_t p = 0;
    for (const auto& [name, parameter] : model.layers()[i]->hf_parameters()) {
      at::Tensor values = parameter.detach();
      if (options.values) {
        values = read_buffer.narrow(0, 0, parameter.numel()).view(parameter.sizes());
        options.values(i, p++, values);
      }
      auto tensor = values;  // written as it is when it is already a contiguous host tensor in `dtype`
      if (!values.device().is_cpu() || values.scalar_type() != dtype || !values.is_contiguous()) {
        tensor = converted_buffer.narrow(0, 0, values.numel()).view(values.sizes());
        tensor.copy_(values);
      }
      writer.add({name, dtype_of(dtype), tensor.sizes().vec(), tensor.data_ptr()});
    }
  }
  writer.finish();

  auto config = nlohmann::json::parse(std::ifstream(fs::path(source_dir) / "config.json"));
  config["torch_dtype"] = options.dtype == "bf16" ? "bfloat16" : "float32";
  config["dtype"] = config["torch_dtype"];
  // Checked and synced: on a full disk this used to leave a 0-byte config.json and exit 0.
  io::write_file_atomically(fs::path(directory) / "config.json", config.dump(2) + "\n");
  for (const char* file : kSideFiles) {
    const auto from = fs::path(source_dir) / file;
    if (fs::exists(from) && !fs::equivalent(fs::path(source_dir), fs::path(directory))) {
      fs::copy_file(from, fs::path(directory) / file, fs::copy_options::overwrite_existing);
    }
  }
}

}  // namespace superoffload::model
