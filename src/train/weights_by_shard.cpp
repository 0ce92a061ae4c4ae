// shard_filler.
#include "train/weights_by_shard.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/fresh_memory.hpp"
#include "base/parallel_ranges.hpp"
#include "cluster/compute_threads.hpp"

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

zero::ZeroEngine::LayerShardFiller resident_shard_filler() {
  return [](size_t, const std::vector<zero::ShardPiece>&, at::Tensor& shard) {
    // In 2 MiB chunks on absolute boundaries: a page split between two threads' ranges would be
    // populated by neither (populate_for_write leaves a shared end page to its neighbour).
    constexpr uintptr_t chunk = uintptr_t{2} << 20;
    const auto begin = reinterpret_cast<uintptr_t>(shard.data_ptr());
    const auto end = begin + shard.nbytes();
    const uintptr_t first = begin / chunk;
    const auto chunks = static_cast<int64_t>((end + chunk - 1) / chunk - first);
    const int threads = base::threads_for(chunks, 8, cluster::compute_threads());
    base::parallel_ranges(chunks, threads, [&](int64_t from, int64_t to) {
      const uintptr_t lo = std::max(begin, (first + static_cast<uintptr_t>(from)) * chunk);
      const uintptr_t hi = std::min(end, (first + static_cast<uintptr_t>(to)) * chunk);
      if (hi > lo) base::populate_for_write(reinterpret_cast<void*>(lo), hi - lo);
    });
  };
}

}  // namespace superoffload::train
