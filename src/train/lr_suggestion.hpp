// What an LR range test ([lr_schedule] type = "lr_range_test") suggests: the learning rate
// where the loss fell fastest against log(lr). The loss is noisy step to step, so it is first
// smoothed with a centred moving average over a fifth of the steps (no lag: a trailing
// average would shift the curve to higher learning rates), and the slope is taken across the
// same window; the points after the loss has diverged (above 4× its lowest) are left out. share/analysis/plot_metrics.py draws the same curve and marks the same point.
#pragma once

#include <cstddef>
#include <vector>

namespace superoffload::train {

struct LrSuggestion {
  bool found = false;          // false: fewer than 5 usable steps, or the loss never fell
  double steepest_lr = 0;      // the suggestion: steepest descent of the smoothed loss
  double min_loss_lr = 0;      // where the smoothed loss is lowest (an upper bound to stay below)
  size_t used_steps = 0;       // steps before the loss diverged
  std::vector<double> smoothed;  // the smoothed loss, one per step
};

// `lr` and `loss` per step, in step order (lr increasing).
LrSuggestion suggest_lr(const std::vector<double>& lr, const std::vector<double>& loss);

}  // namespace superoffload::train
