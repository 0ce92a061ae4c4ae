// FlatLayout.
#include "zero/flat_layout.hpp"

#include <algorithm>

#include "base/error.hpp"

namespace superoffload::zero {

FlatLayout::FlatLayout(std::vector<ParameterSlot> parameters, int world_size)
    : parameters_(std::move(parameters)), world_size_(world_size) {
  SO_CHECK(world_size_ >= 1, "world size must be positive, not " << world_size_);
  for (auto& p : parameters_) {
    p.offset = numel_;
    numel_ += p.numel;
  }
  shard_numel_ = (numel_ + world_size_ - 1) / world_size_;
}

std::vector<ShardPiece> FlatLayout::pieces(int rank) const {
  return pieces_in(shard_begin(rank), shard_begin(rank) + shard_numel_);
}

std::vector<ShardPiece> FlatLayout::pieces_in(int64_t begin, int64_t end) const {
  std::vector<ShardPiece> out;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto& p = parameters_[i];
    const int64_t from = std::max(begin, p.offset), to = std::min(end, p.offset + p.numel);
    if (from < to) out.push_back({i, from - p.offset, from - begin, to - from});
  }
  return out;
}

}  // namespace superoffload::zero
