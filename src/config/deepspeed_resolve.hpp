// The second half of a DeepSpeed import, once every source is loaded: HF Trainer's "auto"
// values and the learning rates DeepSpeed gives as ratios are resolved, and every value the
// import changed is noted, so the start-up log says what the JSON meant.
#pragma once

#include <string>
#include <vector>

#include "config/deepspeed_import.hpp"
#include "config/load.hpp"

namespace superoffload::config {

// Resolves `imported.deferred` in `loaded` (values, origins, notes). "auto" of
// zero_optimization's sizes is HF Trainer's rule on the model's hidden_size (read from
// [model] path's config.json): reduce_bucket_size = hidden², stage3_prefetch_bucket_size =
// 0.9 · hidden², stage3_param_persistence_threshold = 10 · hidden; any other "auto" keeps what
// the TOML file, --set, a derivation or the default gives. A key a later source sets is that
// source's. What cannot be resolved is added to `problems`.
void resolve_deferred(const DeepSpeedImport& imported, LoadedConfig& loaded, std::vector<std::string>& problems);

// One note per key whose value in `loaded` differs from `without_import` (the same sources
// without the DeepSpeed JSON) and comes from `json_file`.
void note_import_differences(const LoadedConfig& loaded, const Config& without_import, const std::string& json_file,
                             std::vector<std::string>& notes);

}  // namespace superoffload::config
