// The plain optimizer over ZeRO shards: fp32 master weights, exp_avg and exp_avg_sq per
// layer shard, on the engine's device (DeepSpeed's offload_optimizer device "none"), stepped
// after backward with LibTorch's fused AdamW (at::_fused_adamw_; at::_fused_adam_ for Adam
// with L2 decay), then written back to the shards in the compute dtype. In fp32 the master
// weights are the engine's shards themselves (nothing to copy back). The parity tests hold
// it to torch::optim::AdamW; it is in turn the reference of the offloaded optimizer.
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
  std::vector<double> layer_seconds() const override { return layer_s_; }
  ShardState export_layer(size_t layer) const override;
  void import_layer(size_t layer, const ShardState& state) override;
  bool imports_by_field() const override { return true; }
  void import_field(size_t layer, StateField field, const at::Tensor& values) override;
  void finish_import(size_t layer, int64_t steps) override;
  std::string describe() const override;

 private:
  zero::ZeroEngine& engine_;
  AdamWSettings s_;
  // The shard's pieces with and without weight decay, as views of each state tensor.
  struct Pieces {
    std::vector<at::Tensor> master, exp_avg, exp_avg_sq;
    std::vector<std::pair<int64_t, int64_t>> ranges;  // (offset, length) in the shard
  };
  std::vector<at::Tensor> master_, exp_avg_, exp_avg_sq_;
  std::vector<Pieces> decayed_, plain_;  // per layer
  int64_t steps_ = 0;
  double lr_ = 0;
  OptimizerTimes times_;
  std::vector<double> layer_s_;  // the last step's, per layer
};

}  // namespace superoffload::optim
