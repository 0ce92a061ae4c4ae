// The plain optimizer over ZeRO shards: fp32 master weights, exp_avg and exp_avg_sq per
// layer shard, on the engine's device (DeepSpeed's offload_optimizer device "none"), stepped
// after backward with LibTorch operations in the order torch::optim::AdamW uses, then
// written back to the shards in the compute dtype. It is also the reference the offloaded,
// speculative optimizer is checked against.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "optim/optimizer.hpp"
#include "zero/engine.hpp"

namespace superoffload::optim {

class ShardedAdamW final : public Optimizer {
 public:
  ShardedAdamW(zero::ZeroEngine& engine, AdamWSettings settings);

  void begin_step(double lr) override;
  void gradient_ready(size_t /*layer*/) override {}  // everything happens after backward
  StepOutcome finish_step() override;
  const OptimizerTimes& times() const override { return times_; }
  ShardState export_layer(size_t layer) const override;
  void import_layer(size_t layer, const ShardState& state) override;
  std::string describe() const override;

 private:
  zero::ZeroEngine& engine_;
  AdamWSettings s_;
  std::vector<at::Tensor> master_, exp_avg_, exp_avg_sq_, decay_mask_;
  int64_t steps_ = 0;
  double lr_ = 0;
  OptimizerTimes times_;
};

}  // namespace superoffload::optim
