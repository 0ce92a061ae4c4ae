// What the evaluations of a run decide: the lowest eval loss so far (the `best` checkpoint of
// [checkpoint] keep_best) and HF's EarlyStoppingCallback ([training] early_stopping_patience).
// Its state goes into every checkpoint, so a resumed run decides as the uninterrupted one.
#pragma once

#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

namespace superoffload::train {

struct EvalTrackerState {
  double best_loss = NAN;       // lowest finite eval loss so far; NaN: none yet
  int64_t best_step = -1;       // the step it was measured after (0: before the first step)
  int64_t without_improvement = 0;  // evaluations in a row that did not lower best_loss by more than the threshold
  int64_t evaluations = 0;
};

struct EvalDecision {
  bool best = false;  // a new lowest eval loss
  bool stop = false;  // patience exhausted
};

class EvalTracker {
 public:
  // `patience` 0: never stop.
  EvalTracker(int64_t patience, double threshold) : patience_(patience), threshold_(threshold) {}

  // One evaluation after `step`. A non-finite loss is never the best and counts as no improvement.
  EvalDecision observe(int64_t step, double loss);

  const EvalTrackerState& state() const { return state_; }
  void restore(const EvalTrackerState& state) { state_ = state; }
  int64_t patience() const { return patience_; }

  // For the checkpoint manifest (the best loss as null while there is none: JSON has no NaN).
  static nlohmann::json to_json(const EvalTrackerState& state);
  // Checkpoints written before evaluations existed hold none: the initial state.
  static EvalTrackerState from_json(const nlohmann::json& json);

 private:
  int64_t patience_;
  double threshold_;
  EvalTrackerState state_;
};

}  // namespace superoffload::train
