// Import of a DeepSpeed JSON config into superoffload's sections: batch sizes, bf16/fp16,
// gradient_clipping, zero_optimization (with offload_optimizer, including SuperOffload's
// super_offload, ratio and cpuadam_cores_perc), optimizer and scheduler. Every key that has
// no meaning here is reported as a warning, never silently dropped. The run means what it
// means in DeepSpeed: a key the JSON leaves out takes DeepSpeed's default, not superoffload's
// (no scheduler block: a constant learning rate), and HF Trainer's "auto" is resolved as HF
// Trainer resolves it.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <toml++/toml.h>

namespace superoffload::config {

// A value the loader resolves once every source is in (load.cpp).
struct DeferredValue {
  std::string key;        // "section.key"
  std::string json_path;  // where the JSON said so
  // "auto" (HF Trainer's placeholder): zero sizes from the model's hidden_size, anything else
  // from the TOML file, --set, a derivation (batch sizes) or superoffload's default.
  // Otherwise a learning rate given as `ratio` × the final [optimizer] lr (WarmupCosineLR).
  bool is_auto = true;
  double ratio = 0;
};

struct DeepSpeedImport {
  toml::table table;                            // [section] key = value, as from a TOML file
  std::map<std::string, std::string> origins;   // "section.key" → "ds.json: zero_optimization.stage"
  std::vector<DeferredValue> deferred;
  std::vector<std::string> notes;               // how DeepSpeed's meaning was kept (logged at start-up)
  std::vector<std::string> warnings;
  std::vector<std::string> problems;            // keys whose values cannot be honoured
};

// The DeepSpeed release whose defaults an import follows where a key is absent.
inline constexpr const char* kDeepSpeedSemantics = "DeepSpeed 0.19";

DeepSpeedImport import_deepspeed_json(const std::filesystem::path& path);

}  // namespace superoffload::config
