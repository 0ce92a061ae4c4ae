// ShardedAdamW.
#include "optim/sharded_adamw.hpp"

#include <torch/autograd.h>

#include <cmath>

#include "base/timer.hpp"

namespace superoffload::optim {

ShardedAdamW::ShardedAdamW(zero::ZeroEngine& engine, AdamWSettings settings) : engine_(engine), s_(settings) {
  const int rank = engine_.comm().rank();
  for (auto& layer : engine_.layers()) {
    master_.push_back(layer.shard_fp32().clone());  // on the engine's device, like the shards
    exp_avg_.push_back(at::zeros_like(master_.back()));
    exp_avg_sq_.push_back(at::zeros_like(master_.back()));
    auto mask = at::zeros(master_.back().sizes(), master_.back().options().dtype(at::kBool));
    for (const auto& piece : layer.layout().pieces(rank)) {
      if (layer.layout().parameters()[piece.parameter].weight_decay) mask.narrow(0, piece.shard_offset, piece.length).fill_(true);
    }
    decay_mask_.push_back(mask);
  }
}

std::string ShardedAdamW::describe() const {
  return std::string(s_.decoupled ? "AdamW" : "Adam") + " on the engine's device (" +
         (master_.empty() ? std::string("cpu") : master_.front().device().str()) + ") after backward";
}

ShardState ShardedAdamW::export_layer(size_t layer) const {
  // Host tensors for the checkpoint writer: copies on a GPU run, the state itself on a CPU run.
  return {master_[layer].cpu(), exp_avg_[layer].cpu(), exp_avg_sq_[layer].cpu(), steps_};
}

void ShardedAdamW::import_layer(size_t layer, const ShardState& state) {
  master_[layer].copy_(state.master);
  exp_avg_[layer].copy_(state.exp_avg);
  exp_avg_sq_[layer].copy_(state.exp_avg_sq);
  steps_ = state.steps;
  engine_.layers()[layer].set_shard(master_[layer]);
}

void ShardedAdamW::begin_step(double lr) {
  lr_ = lr;
  times_ = {};
}

StepOutcome ShardedAdamW::finish_step() {
  base::ScopedTime timed(times_.device_step_s);
  StepOutcome outcome;
  outcome.grad_norm = engine_.global_grad_norm();
  if (!std::isfinite(outcome.grad_norm)) {
    outcome.skipped = true;
    return outcome;
  }
  auto& layers = engine_.layers();
  const double coefficient = clip_coefficient(s_.gradient_clipping, outcome.grad_norm);
  if (coefficient < 1.0) {
    outcome.clipped = true;
    for (auto& layer : layers) layer.grad_shard().mul_(coefficient);
  }
  torch::NoGradGuard no_grad;
  ++steps_;
  const double lr = lr_;
  const double bias_correction1 = 1 - std::pow(s_.beta1, static_cast<double>(steps_));
  const double bias_correction2 = 1 - std::pow(s_.beta2, static_cast<double>(steps_));
  for (size_t i = 0; i < layers.size(); ++i) {
    auto& p = master_[i];
    auto grad = layers[i].grad_shard();
    if (s_.decoupled) {
      p.mul_(at::where(decay_mask_[i], at::scalar_tensor(1 - lr * s_.weight_decay), at::scalar_tensor(1.0)));
    } else if (s_.weight_decay != 0) {
      grad = grad.add(p * at::where(decay_mask_[i], at::scalar_tensor(s_.weight_decay), at::scalar_tensor(0.0)));
    }
    exp_avg_[i].mul_(s_.beta1).add_(grad, 1 - s_.beta1);
    exp_avg_sq_[i].mul_(s_.beta2).addcmul_(grad, grad, 1 - s_.beta2);
    const auto denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bias_correction2)).add_(s_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bias_correction1);
    layers[i].set_shard(p);
  }
  return outcome;
}

}  // namespace superoffload::optim
