// EvalTracker.
#include "train/eval_tracker.hpp"

namespace superoffload::train {

EvalDecision EvalTracker::observe(int64_t step, double loss) {
  EvalDecision decision;
  ++state_.evaluations;
  const bool finite = std::isfinite(loss);
  const bool first = std::isnan(state_.best_loss);
  // The patience follows HF's EarlyStoppingCallback: better by more than the threshold.
  const bool improved = finite && (first || state_.best_loss - loss > threshold_);
  if (finite && (first || loss < state_.best_loss)) {
    state_.best_loss = loss;
    state_.best_step = step;
    decision.best = true;
  }
  state_.without_improvement = improved ? 0 : state_.without_improvement + 1;
  decision.stop = patience_ > 0 && state_.without_improvement >= patience_;
  return decision;
}

nlohmann::json EvalTracker::to_json(const EvalTrackerState& s) {
  return {{"best_loss", std::isnan(s.best_loss) ? nlohmann::json() : nlohmann::json(s.best_loss)},
          {"best_step", s.best_step},
          {"without_improvement", s.without_improvement},
          {"evaluations", s.evaluations}};
}

EvalTrackerState EvalTracker::from_json(const nlohmann::json& json) {
  EvalTrackerState s;
  if (!json.is_object()) return s;
  if (json.contains("best_loss") && json.at("best_loss").is_number()) s.best_loss = json.at("best_loss").get<double>();
  s.best_step = json.value("best_step", int64_t{-1});
  s.without_improvement = json.value("without_improvement", int64_t{0});
  s.evaluations = json.value("evaluations", int64_t{0});
  return s;
}

}  // namespace superoffload::train
