// run_step and SkipAccounting.
#include "train/step.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "base/error.hpp"
#include "base/timer.hpp"
#include "model/causal_lm.hpp"
#include "zero/trace_scope.hpp"

namespace superoffload::train {

using base::now_s;

StepResult run_step(zero::ZeroEngine& engine, optim::Optimizer& optimizer, const std::vector<MicroBatch>& batches,
                    double lr, const StepHooks& hooks) {
  SO_CHECK(!batches.empty(), "a training step needs at least one micro-batch");
  const double start = now_s();
  auto& comm = engine.comm();
  StepResult result;
  // Every token of the global batch weighs the same: 1 / (tokens over all ranks).
  {
    const zero::TraceScope traced("superoffload/token count");
    for (const auto& batch : batches) {
      // This rank's share: its shard of the rows under sequence parallelism.
      result.tokens += static_cast<double>(engine.local_rows(batch.labels).ne(model::kIgnoreLabel).sum().item<int64_t>());
    }
    comm.all_reduce_host(&result.tokens, 1, comm::ReduceOp::sum);
  }

  if (hooks.progress) hooks.progress("forward and backward (all-gathers, reduce-scatters)");
  engine.reset_times();
  engine.zero_grad();
  size_t micro_batch = 0;
  // Each layer's forward and reduced gradient, on every micro-batch, is progress: a step longer
  // than collective_timeout_s is no stall; only a layer that long would be.
  if (hooks.progress) {
    engine.on_layer_done([&](size_t layer, bool backward) {
      hooks.progress(std::string(backward ? "backward" : "forward") + " of micro-batch " + std::to_string(micro_batch + 1) +
                     ", layer " + std::to_string(layer) + (backward ? " reduced" : "") +
                     " (all-gathers, reduce-scatters)");
    });
  }
  engine.on_gradient_ready([&](size_t layer) {
    if (hooks.before_gradient_ready) hooks.before_gradient_ready(layer);
    optimizer.gradient_ready(layer);
  });
  optimizer.begin_step(lr);
  const auto device = engine.device();
  const double loss_scale = 1.0 / std::max(1.0, result.tokens);
  // Over ranks, not replicas: a sequence-parallel group's ranks each pass on the pooled aux
  // loss's gradient through their own shard (ZeroEngine::pooled_load_balancing), and each
  // reports the pooled value, so the mean over ranks is the mean over forwards either way.
  const double aux_scale = 1.0 / static_cast<double>(batches.size() * static_cast<size_t>(comm.size()));
  double sums[2] = {0, 0};  // loss, aux
  const double forward_backward_start = now_s();
  // Every micro-batch's tokens, labels and positions to the device at once, from pinned copies
  // and without waiting: a pageable copy synchronises the host with the device (the first
  // GPU trace counted two a step, outside every scope of ours).
  std::vector<std::array<at::Tensor, 3>> on_device;
  {
    const zero::TraceScope traced("superoffload/batch to device");
    auto to_device = [&device](const at::Tensor& t) {
      if (!t.defined() || t.device() == device) return t;
      return device.is_cuda() ? t.pin_memory().to(device, /*non_blocking=*/true) : t.to(device);
    };
    for (const auto& b : batches) on_device.push_back({to_device(b.tokens), to_device(b.labels), to_device(b.positions)});
  }
  try {
    for (size_t m = 0; m < batches.size(); ++m) {
      micro_batch = m;
      if (hooks.progress && m > 0) hooks.progress("forward of micro-batch " + std::to_string(m + 1));
      const auto& [tokens, labels, positions] = on_device[m];
      const auto r = engine.forward_backward(tokens, labels, positions, loss_scale, aux_scale, m + 1 == batches.size());
      sums[0] += r.loss_sum;
      sums[1] += r.aux_loss;
    }
  } catch (...) {
    engine.on_gradient_ready(nullptr);  // the hooks refer to this call's arguments
    engine.on_layer_done(nullptr);
    throw;
  }
  engine.on_gradient_ready(nullptr);
  engine.on_layer_done(nullptr);
  result.forward_backward_s = now_s() - forward_backward_start;
  {
    const zero::TraceScope traced("superoffload/loss all-reduce");
    comm.all_reduce_host(sums, 2, comm::ReduceOp::sum);
  }
  result.loss = sums[0] / std::max(1.0, result.tokens);
  result.aux_loss = sums[1] / static_cast<double>(batches.size() * static_cast<size_t>(comm.size()));

  if (hooks.progress) hooks.progress("optimizer step (gradient-norm all-reduce)");
  const double optimizer_start = now_s();
  {
    const zero::TraceScope traced("superoffload/optimizer step");
    result.outcome = optimizer.finish_step();
  }
  const double end = now_s();
  result.optimizer_s = end - optimizer_start;
  result.seconds = end - start;
  result.engine = engine.times();
  result.optimizer = optimizer.times();
  return result;
}

void SkipAccounting::count(const optim::StepOutcome& outcome, double loss, int64_t step) {
  SO_CHECK(updated_ || std::isfinite(loss),
           "the loss of step " << step << " is " << loss << " before this run has updated the weights: it is "
                               << "non-finite from the start, so the weights or the data are at fault, not training"
                               << hint("check the weights (NaN or inf?), config.json (rms_norm_eps, rope_theta, "
                                       "sizes) and the data; when resuming, resume from an earlier checkpoint"));
  if (!outcome.skipped) {
    updated_ = true;
    consecutive_ = 0;
    return;
  }
  ++total_;
  SO_CHECK(++consecutive_ < limit_, consecutive_ << " consecutive steps had non-finite gradients (step " << step << ")"
                                                 << hint("lower [optimizer] lr, enable gradient_clipping, or check the data"));
}

}  // namespace superoffload::train
