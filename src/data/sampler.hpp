// The distributed sampler: a deterministic shuffle of all samples per epoch (from the seed
// and the epoch), cut into global batches of micro × accumulation × world samples; rank r
// takes micro-batch m as samples [(m·world + r)·micro, +micro) of the batch — disjoint
// slices. Its position (epoch, batch) is all a resumed run needs to continue with the exact
// next batch. A last partial batch of an epoch is dropped.
#pragma once

#include <cstdint>
#include <vector>

namespace superoffload::data {

struct SamplerPosition {
  int64_t epoch = 0;
  int64_t batch = 0;  // next batch within the epoch
};

class DistributedSampler {
 public:
  DistributedSampler(int64_t samples, uint64_t seed, bool shuffle, int world_size, int rank, int64_t micro_batch,
                     int64_t accumulation);

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const SamplerPosition& position() const { return position_; }
  void set_position(const SamplerPosition& position);

  // Sample indices of this rank's micro-batches of the next global batch, then advances.
  std::vector<std::vector<int64_t>> next();

 private:
  void shuffle_epoch();
  int64_t samples_;
  uint64_t seed_;
  bool shuffle_;
  int world_, rank_;
  int64_t micro_, accumulation_, batches_per_epoch_;
  SamplerPosition position_;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace superoffload::data
