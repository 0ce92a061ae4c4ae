// Writing a model as a HuggingFace directory: sharded safetensors with an index, config.json
// and the tokenizer files of the source model. Streams layer by layer: at most one layer's
// tensors (plus the current shard) are held in extra memory.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "model/causal_lm.hpp"

namespace superoffload::model {

struct ExportOptions {
  std::string dtype = "bf16";  // "bf16" | "fp32"
  size_t max_shard_bytes = 5'000'000'000;
  // Streaming from elsewhere (a checkpoint): fill layer i just before it is written, and let
  // it go right after, so only one layer's values are held at a time.
  std::function<void(size_t)> before_layer, after_layer;
};

// `source_dir` provides config.json and tokenizer files. The directory is written in place;
// its weights files are replaced.
void export_hf(const CausalLM& model, const std::string& source_dir, const std::string& directory,
               const ExportOptions& options);

}  // namespace superoffload::model
