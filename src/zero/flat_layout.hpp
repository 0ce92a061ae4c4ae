// How one layer's parameters lie in a flat buffer and how that buffer is split among ranks:
// parameters in a fixed order, back to back, padded to a multiple of the world size; rank r
// owns the contiguous shard [r·shard, (r+1)·shard). The same layout, kept in checkpoints,
// lets a run of N ranks read the slices it needs from a run of M.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace superoffload::zero {

struct ParameterSlot {
  std::string name;            // HF name
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t offset = 0;          // in the flat buffer
  bool weight_decay = true;    // false for norms and biases (model::CausalLM::decays)
};

// A piece of one parameter inside one rank's shard.
struct ShardPiece {
  size_t parameter = 0;        // index into parameters()
  int64_t parameter_offset = 0;
  int64_t shard_offset = 0;
  int64_t length = 0;
};

class FlatLayout {
 public:
  FlatLayout() = default;
  // Offsets are assigned in the order given.
  FlatLayout(std::vector<ParameterSlot> parameters, int world_size);

  const std::vector<ParameterSlot>& parameters() const { return parameters_; }
  int world_size() const { return world_size_; }
  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return shard_numel_ * world_size_; }
  int64_t shard_numel() const { return shard_numel_; }
  int64_t shard_begin(int rank) const { return shard_numel_ * rank; }
  // The parameter pieces in `rank`'s shard, in flat order (padding is not a piece).
  std::vector<ShardPiece> pieces(int rank) const;
  // The same for any flat range [begin, end): shard_offset counts from `begin`.
  std::vector<ShardPiece> pieces_in(int64_t begin, int64_t end) const;

 private:
  std::vector<ParameterSlot> parameters_;
  int world_size_ = 1;
  int64_t numel_ = 0;
  int64_t shard_numel_ = 0;
};

}  // namespace superoffload::zero
