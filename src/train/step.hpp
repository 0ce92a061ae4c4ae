// One training step, the protocol every driver shares (the trainer, the parity tests and the
// benchmarks call this and nothing else):
//
//   count the tokens of the global batch (all-reduced): each token's loss weighs 1 / that
//   zero the gradient shards, register the optimizer's gradient-ready hook, begin_step(lr)
//   forward + backward of each micro-batch (gradients accumulate in the shards; the last one
//     announces each layer's completed shard to the optimizer)
//   all-reduce the loss sums, then finish_step(): validation, clipping or skipping, update
//
// and the accounting across steps: consecutive skipped steps end the run past a limit.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "optim/optimizer.hpp"
#include "zero/engine.hpp"

namespace superoffload::train {

// One micro-batch of this rank, on the host: token ids and labels [batch, seq] int64, labels
// already shifted with model::kIgnoreLabel where nothing is predicted. The step moves them
// to the engine's device.
struct MicroBatch {
  at::Tensor tokens, labels;
  at::Tensor positions;  // [data] attention = "document": each packed sample from 0; else undefined
};

struct StepHooks {
  // Hears what the step is doing ("forward and backward", "optimizer step"), e.g. a watchdog.
  std::function<void(const std::string& what)> progress;
  // Called with each layer whose gradient shard is complete, before the optimizer sees it
  // (tests inspect the order or make a gradient non-finite here).
  std::function<void(size_t layer)> before_gradient_ready;
};

struct StepResult {
  double loss = 0;      // mean loss per token over the global batch
  double aux_loss = 0;  // MoE load-balancing aux_loss (HF's, unweighted), mean over the micro-batches of all ranks
  double tokens = 0;    // tokens that carry a loss in the global batch
  optim::StepOutcome outcome;
  double seconds = 0;      // this rank's wall time of the step (without making the batches)
  double forward_backward_s = 0;  // of which the micro-batches' forward and backward passes
  double optimizer_s = 0;         // of which in finish_step
  zero::PhaseTimes engine;           // this step's engine phases
  optim::OptimizerTimes optimizer;   // this step's optimizer phases
};

// Collective over the engine's ranks. `batches`: this rank's micro-batches of the step (the
// same count on every rank), `lr`: the step's learning rate.
StepResult run_step(zero::ZeroEngine& engine, optim::Optimizer& optimizer, const std::vector<MicroBatch>& batches,
                    double lr, const StepHooks& hooks = {});

// Counts skipped steps; more than `limit` in a row is an error (a diverged run, or bad data).
// A non-finite loss before this run has made any update is an error at once: the loss is then
// a function of the loaded weights and the data alone, so skipping steps cannot help.
class SkipAccounting {
 public:
  SkipAccounting(int64_t limit, int64_t skipped_before) : limit_(limit), total_(skipped_before) {}
  // `loss`: the step's global loss (the same on every rank); `step`: 1-based, for messages.
  void count(const optim::StepOutcome& outcome, double loss, int64_t step);
  int64_t total() const { return total_; }

 private:
  int64_t limit_, total_, consecutive_ = 0;
  bool updated_ = false;  // a step of this run has changed the weights
};

}  // namespace superoffload::train
