// suggest_lr.
#include "train/lr_suggestion.hpp"

#include <algorithm>
#include <cmath>

namespace superoffload::train {

LrSuggestion suggest_lr(const std::vector<double>& lr, const std::vector<double>& loss) {
  LrSuggestion s;
  const size_t n = std::min(lr.size(), loss.size());
  // Centred moving average over about a fifth of the steps (an odd window, at least 3).
  const size_t half = std::max<size_t>(1, n / 10);
  s.smoothed.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t begin = i >= half ? i - half : 0, end = std::min(n, i + half + 1);
    double sum = 0;
    size_t count = 0;
    for (size_t j = begin; j < end; ++j) {
      if (std::isfinite(loss[j])) {
        sum += loss[j];
        ++count;
      }
    }
    s.smoothed[i] = count ? sum / static_cast<double>(count) : NAN;
  }
  // Up to divergence: the first step whose smoothed loss is not finite or above 4× the lowest so far.
  double lowest = INFINITY;
  size_t used = 0;
  for (; used < n; ++used) {
    if (!std::isfinite(s.smoothed[used]) || !(lr[used] > 0) || s.smoothed[used] > 4 * lowest) break;
    lowest = std::min(lowest, s.smoothed[used]);
  }
  s.used_steps = used;
  if (used < 5) return s;
  // The slope d(loss)/d(log lr) by central differences over the smoothing window (closer
  // points would measure the noise where a linear sweep packs them densely in log lr); the
  // most negative one.
  double steepest = 0;
  size_t at = 0, lowest_at = 0;
  for (size_t i = 1; i + 1 < used; ++i) {
    const size_t below = i >= half ? i - half : 0, above = std::min(used - 1, i + half);
    const double run = std::log(lr[above]) - std::log(lr[below]);
    if (!(run > 0)) continue;
    const double slope = (s.smoothed[above] - s.smoothed[below]) / run;
    if (slope < steepest) {
      steepest = slope;
      at = i;
    }
  }
  for (size_t i = 0; i < used; ++i) {
    if (s.smoothed[i] < s.smoothed[lowest_at]) lowest_at = i;
  }
  if (steepest >= 0) return s;
  s.found = true;
  s.steepest_lr = lr[at];
  s.min_loss_lr = lr[lowest_at];
  return s;
}

}  // namespace superoffload::train
