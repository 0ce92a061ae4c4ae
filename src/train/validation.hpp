// Validation during training: the eval loss of the current weights over a fixed set of
// samples — a file of its own ([data] eval_path) or a share held out of the training data
// ([data] eval_fraction) — split over all ranks.
//
// The set is cut into batches of per_device_eval_batch_size samples in a fixed order; data-
// parallel replica r (a rank, or a sequence-parallel group whose ranks each run their shard of
// the rows) runs batches r, r + replicas, ... (every rank runs as many forwards: a replica
// without a batch in the last round runs one whose tokens predict nothing, since the gathers
// are collective).
// Each batch's loss sum and token count travel to every rank in a vector indexed by batch,
// summed in batch order there: the same batches, the same sums, in the same order at any
// world size — the eval loss does not depend on how many ranks computed it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/token_dataset.hpp"

namespace superoffload::cluster {
class MpiWorld;
}
namespace superoffload::zero {
class ZeroEngine;
}

namespace superoffload::train {

struct ValidationResult {
  double loss = 0;       // mean next-token loss over every target token of the set (NaN: none finite)
  int64_t tokens = 0;    // target tokens counted
  int64_t samples = 0;
  double seconds = 0;
};

class Validation {
 public:
  // `dataset` must outlive this. `indices`: the samples of `dataset` that form the set, in
  // order; only the first max_batches × batch of them are used (max_batches 0: all).
  // `source` names the data in errors. Refuses a set smaller than one batch per replica
  // (`replicas`: world / sequence_parallel_size).
  Validation(const data::TokenDataset& dataset, std::vector<int64_t> indices, int64_t batch, int64_t max_batches,
             const cluster::MpiWorld& world, int replicas, std::string source);

  int64_t samples() const { return static_cast<int64_t>(indices_.size()); }
  int64_t batches() const { return (samples() + batch_ - 1) / batch_; }

  // Collective. `progress` (optional) hears each batch, e.g. for the watchdog.
  ValidationResult evaluate(zero::ZeroEngine& engine, const std::function<void(const std::string&)>& progress = nullptr) const;

 private:
  const data::TokenDataset& dataset_;
  std::vector<int64_t> indices_;
  int64_t batch_;
  const cluster::MpiWorld& world_;
  int replicas_;
};

}  // namespace superoffload::train
