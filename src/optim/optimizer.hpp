// The interface every optimizer over ZeRO shards implements, and the one place the step's
// validation rules live: the gradient-clipping coefficient and what a non-finite gradient
// does (the step is skipped). Whoever drives a step (train/step.hpp) calls, in order:
//
//   begin_step(lr)        before the step's backward passes
//   gradient_ready(layer) as each layer's gradient shard completes on the last micro-batch
//                         (the driver registers this with the engine; nothing else does)
//   finish_step()         after backward: validate, clip or skip, step what is left, and
//                         put the updated weights into the engine's shards
//
// Between steps the state of each layer can be exported and imported (checkpoints).
#pragma once

#include <ATen/ATen.h>

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/startup_timeline.hpp"
#include "optim/shard_state.hpp"
#include "optim/step_outcome.hpp"

namespace superoffload::optim {

// The AdamW hyper-parameters both optimizers share ([optimizer] and [training]).
struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  bool decoupled = true;          // AdamW; false: Adam with L2 weight decay added to the gradient
  double gradient_clipping = 0;   // max global norm; 0: no clipping
};

// torch.nn.utils.clip_grad_norm_'s rule: gradients are scaled by max_norm / (norm + 1e-6)
// when that is below 1. Returns 1 when no clipping applies (max_norm 0, or a small norm).
inline double clip_coefficient(double max_norm, double grad_norm) {
  if (max_norm <= 0) return 1.0;
  const double coefficient = max_norm / (grad_norm + 1e-6);
  return coefficient < 1.0 ? coefficient : 1.0;
}

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  virtual void begin_step(double lr) = 0;
  virtual void gradient_ready(size_t layer) = 0;
  // Collective over the engine's ranks (the gradient norm is all-reduced).
  virtual StepOutcome finish_step() = 0;
  virtual const OptimizerTimes& times() const = 0;
  // Seconds the last step spent on each layer's state (host clock: on a GPU, the device
  // share's kernels are timed as launched); empty when the optimizer does not know.
  virtual std::vector<double> layer_seconds() const { return {}; }
  // Parts of its construction the start-up timeline shows on their own (host buffers and
  // pinning); the rest of it is the optimizer state's phase.
  virtual std::vector<base::StartupPhase> setup_phases() const { return {}; }

  // One layer's state as host fp32 tensors (checkpoints); import also sets the engine's
  // shard from the master weights. Call between steps.
  virtual ShardState export_layer(size_t layer) const = 0;
  virtual void import_layer(size_t layer, const ShardState& state) = 0;
  // The same one field at a time, so that a resume reads the next field while this one is
  // taken: each of a layer's fields once, master first (it also sets the engine's shard), the
  // caller's `values` free for reuse when the call returns, then finish_import with the steps.
  // Only where imports_by_field(); otherwise import_layer.
  enum class StateField { master, exp_avg, exp_avg_sq };
  virtual bool imports_by_field() const { return false; }
  virtual void import_field(size_t /*layer*/, StateField /*field*/, const at::Tensor& /*values*/) {}
  virtual void finish_import(size_t /*layer*/, int64_t /*steps*/) {}
  // What this rank's optimizer has learned beyond the layers' state, as JSON text (empty:
  // nothing): SuperOffload's speculation history. Checkpoints keep it per rank, so that a run
  // resumed at the same world size decides as the uninterrupted run did.
  virtual std::string export_rank_state() const { return {}; }
  virtual void import_rank_state(const std::string& /*json*/) {}
  // The fp32 master weights of a layer's shard, on the host (tests, evaluation).
  at::Tensor master(size_t layer) const { return export_layer(layer).master; }

  // The kernel ids of the threads that run this rank's CPU optimizer (resctrl puts them in a
  // group of their own); empty when no thread is the optimizer's alone.
  virtual std::vector<pid_t> thread_ids() { return {}; }

  // One line for the start-up log: which optimizer, where it steps.
  virtual std::string describe() const = 0;
};

}  // namespace superoffload::optim
