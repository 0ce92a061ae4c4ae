// LrSchedule.
#include "train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace superoffload::train {

LrSchedule::LrSchedule(const config::LrScheduleConfig& schedule, double peak_lr, int64_t total_steps)
    : s_(schedule), peak_(peak_lr), total_(std::max<int64_t>(1, total_steps)) {}

double LrSchedule::at(int64_t step) const {
  if (s_.type == config::LrScheduleType::lr_range_test) {
    // DeepSpeed's LRRangeTest: step k (0-based) runs at min_lr × (1 + rate × k / size).
    const double interval = static_cast<double>(step) / static_cast<double>(s_.lr_range_test_step_size);
    return s_.lr_range_test_min_lr *
           (1 + s_.lr_range_test_step_rate * (s_.lr_range_test_staircase ? std::floor(interval) : interval));
  }
  const int64_t warmup = s_.warmup_num_steps;
  if (step < warmup) {
    // DeepSpeed WarmupLR: linear in step, or log(step + 1) / log(warmup + 1).
    const double t = s_.warmup_type == config::WarmupType::log ? std::log(static_cast<double>(step) + 1) / std::log(static_cast<double>(warmup) + 1)
                                             : static_cast<double>(step + 1) / static_cast<double>(warmup);
    return s_.warmup_min_lr + (peak_ - s_.warmup_min_lr) * t;
  }
  if (s_.type == config::LrScheduleType::constant) return peak_;
  const double span = std::max<int64_t>(1, total_ - warmup);
  const double progress = std::clamp(static_cast<double>(step - warmup) / span, 0.0, 1.0);
  const double factor = s_.type == config::LrScheduleType::cosine ? 0.5 * (1 + std::cos(M_PI * progress)) : 1 - progress;
  return s_.min_lr + (peak_ - s_.min_lr) * factor;
}

}  // namespace superoffload::train
