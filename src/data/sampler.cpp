// DistributedSampler.
#include "data/sampler.hpp"

#include <numeric>
#include <random>

#include "base/error.hpp"

namespace superoffload::data {

DistributedSampler::DistributedSampler(int64_t samples, uint64_t seed, bool shuffle, int world_size, int rank,
                                       int64_t micro_batch, int64_t accumulation)
    : samples_(samples), seed_(seed), shuffle_(shuffle), world_(world_size), rank_(rank), micro_(micro_batch),
      accumulation_(accumulation) {
  const int64_t global = micro_ * accumulation_ * world_;
  batches_per_epoch_ = samples_ / global;
  SO_CHECK(batches_per_epoch_ > 0, "the dataset has " << samples_ << " samples, fewer than one global batch of "
                                                      << global << hint("use more data or a smaller batch"));
}

void DistributedSampler::set_position(const SamplerPosition& position) {
  position_ = position;
  order_epoch_ = -1;
}

void DistributedSampler::shuffle_epoch() {
  order_.resize(static_cast<size_t>(samples_));
  std::iota(order_.begin(), order_.end(), 0);
  if (shuffle_) {
    // Fisher–Yates with a fixed engine and explicit arithmetic: the same on every platform.
    std::mt19937_64 engine(seed_ * 1000003u + static_cast<uint64_t>(position_.epoch));
    for (int64_t i = samples_ - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(engine() % static_cast<uint64_t>(i + 1));
      std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
    }
  }
  order_epoch_ = position_.epoch;
}

std::vector<std::vector<int64_t>> DistributedSampler::next() {
  if (position_.batch >= batches_per_epoch_) {
    ++position_.epoch;
    position_.batch = 0;
  }
  if (order_epoch_ != position_.epoch) shuffle_epoch();
  const int64_t global = micro_ * accumulation_ * world_;
  const int64_t base = position_.batch * global;
  std::vector<std::vector<int64_t>> micro_batches;
  for (int64_t m = 0; m < accumulation_; ++m) {
    std::vector<int64_t> indices;
    const int64_t first = base + (m * world_ + rank_) * micro_;
    for (int64_t i = 0; i < micro_; ++i) indices.push_back(order_[static_cast<size_t>(first + i)]);
    micro_batches.push_back(std::move(indices));
  }
  ++position_.batch;
  return micro_batches;
}

}  // namespace superoffload::data
