// Reading pretrained weights by shard: the engine's filler (zero::ZeroEngine::LayerShardFiller)
// over model_io's ranges, so that a rank reads from the safetensors mapping only the bytes of
// the pieces its shards hold, converted once, straight into the shard (no full layer first).
#pragma once

#include <functional>

#include "model_io/load_model.hpp"
#include "zero/engine.hpp"

namespace superoffload::train {

// Null unless `loaded` reads safetensors (LoadedModel::fill_ranges). `around` (optional) wraps
// each layer's read, e.g. to time it; `loaded` must outlive the engine's construction.
zero::ZeroEngine::LayerShardFiller shard_filler(model::LoadedModel& loaded,
                                                std::function<void(const std::function<void()>&)> around = nullptr);

}  // namespace superoffload::train
