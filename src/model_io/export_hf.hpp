// Writing a model as a HuggingFace directory: sharded safetensors with an index, config.json
// and the tokenizer files of the source model. Streams tensor by tensor: each is converted and
// written straight to its shard, so at most one tensor (and its converted copy) is held in
// extra memory, whatever the model's size.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "model/causal_lm.hpp"

namespace superoffload::model {

struct ExportOptions {
  std::string dtype = "bf16";  // "bf16" | "fp32"
  size_t max_shard_bytes = 5'000'000'000;
  // Streaming from elsewhere (a checkpoint): fills `into` (fp32, on the host, the parameter's
  // shape; a view of a buffer reused for every tensor) with the values of parameter p of layer
  // l just before they are written. Unset: the model's own parameters are written.
  std::function<void(size_t layer, size_t parameter, at::Tensor& into)> values;
};

// `source_dir` provides config.json and tokenizer files. The directory is written in place;
// its weights files are replaced.
void export_hf(const CausalLM& model, const std::string& source_dir, const std::string& directory,
               const ExportOptions& options);

}  // namespace superoffload::model
