// Import of a DeepSpeed JSON config into superoffload's sections: batch sizes, bf16/fp16,
// gradient_clipping, zero_optimization (with offload_optimizer, including SuperOffload's
// super_offload, ratio and cpuadam_cores_perc), optimizer and scheduler. Every key that has
// no meaning here is reported as a warning, never silently dropped.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <toml++/toml.h>

namespace superoffload::config {

struct DeepSpeedImport {
  toml::table table;                            // [section] key = value, as from a TOML file
  std::map<std::string, std::string> origins;   // "section.key" → "ds.json: zero_optimization.stage"
  std::vector<std::string> warnings;
  std::vector<std::string> problems;            // keys whose values cannot be honoured
};

DeepSpeedImport import_deepspeed_json(const std::filesystem::path& path);

}  // namespace superoffload::config
