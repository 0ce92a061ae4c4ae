// shard_filler.
#include "train/weights_by_shard.hpp"

#include <utility>
#include <vector>

namespace superoffload::train {

zero::ZeroEngine::LayerShardFiller shard_filler(model::LoadedModel& loaded,
                                                std::function<void(const std::function<void()>&)> around) {
  if (!loaded.fill_ranges) return nullptr;
  return [&loaded, around = std::move(around)](size_t layer, const std::vector<zero::ShardPiece>& pieces,
                                               at::Tensor& shard) {
    std::vector<model::WeightRange> ranges;
    ranges.reserve(pieces.size());
    for (const auto& piece : pieces) {
      ranges.push_back({piece.parameter, piece.parameter_offset, piece.length, shard.data_ptr<float>() + piece.shard_offset});
    }
    const auto read = [&] { loaded.fill_ranges(layer, ranges); };
    if (around) {
      around(read);
    } else {
      read();
    }
  };
}

}  // namespace superoffload::train
