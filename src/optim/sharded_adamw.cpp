// ShardedAdamW.
#include "optim/sharded_adamw.hpp"

#include <torch/autograd.h>

#include <cmath>

#include "base/timer.hpp"

namespace superoffload::optim {

ShardedAdamW::ShardedAdamW(zero::ZeroEngine& engine, AdamWSettings settings) : engine_(engine), s_(settings) {
  for (auto& layer : engine_.layers()) {
    // fp32 compute: the shard is the master copy (on the engine's device, like the shards).
    master_.push_back(layer.compute_dtype() == at::kFloat ? layer.shard() : layer.shard_fp32().clone());
    exp_avg_.push_back(at::zeros_like(master_.back()));
    exp_avg_sq_.push_back(at::zeros_like(master_.back()));
    Pieces decayed, plain;
    for (const auto& piece : layer.shard_pieces()) {
      auto& into = layer.layout().parameters()[piece.parameter].weight_decay ? decayed : plain;
      auto view = [&](const at::Tensor& t) { return t.narrow(0, piece.shard_offset, piece.length); };
      into.master.push_back(view(master_.back()));
      into.exp_avg.push_back(view(exp_avg_.back()));
      into.exp_avg_sq.push_back(view(exp_avg_sq_.back()));
      into.ranges.emplace_back(piece.shard_offset, piece.length);
    }
    decayed_.push_back(std::move(decayed));
    plain_.push_back(std::move(plain));
  }
}

std::string ShardedAdamW::describe() const {
  return std::string(s_.decoupled ? "AdamW" : "Adam") + " on the engine's device (" +
         (master_.empty() ? std::string("cpu") : master_.front().device().str()) + ") after backward";
}

ShardState ShardedAdamW::export_layer(size_t layer) const {
  // Host tensors for the checkpoint writer: copies on a GPU run, the state itself on a CPU run.
  return {master_[layer].cpu(), exp_avg_[layer].cpu(), exp_avg_sq_[layer].cpu(), steps_, !master_[layer].is_cpu()};
}

void ShardedAdamW::import_layer(size_t layer, const ShardState& state) {
  import_field(layer, StateField::master, state.master);
  import_field(layer, StateField::exp_avg, state.exp_avg);
  import_field(layer, StateField::exp_avg_sq, state.exp_avg_sq);
  finish_import(layer, state.steps);
}

void ShardedAdamW::import_field(size_t layer, StateField field, const at::Tensor& values) {
  switch (field) {
    case StateField::master:
      master_[layer].copy_(values);
      engine_.layers()[layer].set_shard(master_[layer]);
      break;
    case StateField::exp_avg: exp_avg_[layer].copy_(values); break;
    case StateField::exp_avg_sq: exp_avg_sq_[layer].copy_(values); break;
  }
}

void ShardedAdamW::finish_import(size_t /*layer*/, int64_t steps) { steps_ = steps; }

void ShardedAdamW::begin_step(double lr) {
  lr_ = lr;
  times_ = {};
}

StepOutcome ShardedAdamW::finish_step() {
  StepOutcome outcome;
  {
    base::ScopedTime timed(times_.norm_s);
    outcome.grad_norm = engine_.global_grad_norm();
  }
  base::ScopedTime timed(times_.device_step_s);
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
  layer_s_.assign(layers.size(), 0.0);
  for (size_t i = 0; i < layers.size(); ++i) {
    base::ScopedTime layer_time(layer_s_[i]);
    const auto& grad = layers[i].grad_shard();
    auto step = at::full({}, static_cast<double>(steps_), master_[i].options());
    for (const auto* pieces : {&decayed_[i], &plain_[i]}) {
      if (pieces->master.empty()) continue;
      std::vector<at::Tensor> grads;
      for (const auto& [offset, length] : pieces->ranges) grads.push_back(grad.narrow(0, offset, length));
      const std::vector<at::Tensor> steps(pieces->master.size(), step);  // read, not advanced, by the kernel
      const double decay = pieces == &decayed_[i] ? s_.weight_decay : 0.0;
      if (s_.decoupled) {
        at::_fused_adamw_(pieces->master, grads, pieces->exp_avg, pieces->exp_avg_sq, {}, steps, lr_, s_.beta1,
                          s_.beta2, decay, s_.eps, false, false);
      } else {
        at::_fused_adam_(pieces->master, grads, pieces->exp_avg, pieces->exp_avg_sq, {}, steps, lr_, s_.beta1,
                         s_.beta2, decay, s_.eps, false, false);
      }
    }
    layers[i].set_shard(master_[i]);
  }
  return outcome;
}

}  // namespace superoffload::optim
