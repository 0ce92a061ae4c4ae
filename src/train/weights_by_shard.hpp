// How the engine's shards are filled as it is built (zero::ZeroEngine::LayerShardFiller), when
// not from the layers' own parameters: pretrained weights read by shard — a rank reads from the
// safetensors mapping only the bytes of the pieces its shards hold, converted once, straight
// into the shard (no full layer first) — or, for a run that resumes, nothing at all yet.
#pragma once

#include <functional>

#include "model_io/load_model.hpp"
#include "zero/engine.hpp"

namespace superoffload::train {

// Null unless `loaded` reads safetensors (LoadedModel::fill_ranges). `around` (optional) wraps
// each layer's read, e.g. to time it; `loaded` must outlive the engine's construction.
zero::ZeroEngine::LayerShardFiller shard_filler(model::LoadedModel& loaded,
                                                std::function<void(const std::function<void()>&)> around = nullptr);

// For a run that resumes: the checkpoint writes every shard later (TrainingCheckpoints::resume),
// so the layers' parameters (allocated, never filled) are not copied in. The shard's memory is
// only made resident now, zero, on the rank's threads (base::populate_for_write), so that the
// resume's writes take no page faults. (Copying the unfilled parameters in had cost a read fault
// per page of them and a write fault per page of the shard: 0.55B at 1 rank, 0.7-3.3 s of
// "partitioning" on this project's 2-core VM.)
zero::ZeroEngine::LayerShardFiller resident_shard_filler();

}  // namespace superoffload::train
