// The plain reference optimizer over ZeRO shards: fp32 master weights, exp_avg and exp_avg_sq
// per layer shard, on the engine's device (DeepSpeed's offload_optimizer device "none"),
// stepped after backward with LibTorch operations in the order torch::optim::AdamW uses,
// then written back to the shards in the compute dtype.
// Also the global gradient norm and clipping. (The offloaded, speculative optimizer replaces
// it for real runs; this one is the baseline it is checked against.)
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "zero/engine.hpp"
#include "zero/shard_state.hpp"

namespace superoffload::zero {

struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  bool decoupled = true;  // AdamW; false: Adam with L2 weight decay added to the gradient
};

class ShardedAdamW {
 public:
  ShardedAdamW(ZeroEngine& engine, AdamWSettings settings);

  // The engine's global gradient norm (see ZeroEngine::global_grad_norm).
  double global_grad_norm();
  // torch.nn.utils.clip_grad_norm_'s rule: scale by max_norm / (norm + 1e-6) when below 1.
  void clip_gradients(double max_norm, double norm);
  void step(double lr);

  at::Tensor& master(size_t layer) { return master_[layer]; }
  at::Tensor& exp_avg(size_t layer) { return exp_avg_[layer]; }
  at::Tensor& exp_avg_sq(size_t layer) { return exp_avg_sq_[layer]; }
  int64_t steps() const { return steps_; }
  // Checkpoint export and import of layer `layer`'s state; import also sets the device shard.
  ShardState shard_state(size_t layer) const;
  void load_shard_state(size_t layer, const ShardState& state);

 private:
  ZeroEngine& engine_;
  AdamWSettings s_;
  std::vector<at::Tensor> master_, exp_avg_, exp_avg_sq_, decay_mask_;
  int64_t steps_ = 0;
};

}  // namespace superoffload::zero
