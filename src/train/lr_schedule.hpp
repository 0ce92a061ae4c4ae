// Learning rate per step: warm-up (linear, or DeepSpeed WarmupLR's log) from warmup_min_lr
// to lr over warmup_num_steps, then constant, or cosine / linear decay to min_lr by the last
// step.
#pragma once

#include <cstdint>

#include "config/config.hpp"

namespace superoffload::train {

class LrSchedule {
 public:
  LrSchedule(const config::LrScheduleConfig& schedule, double peak_lr, int64_t total_steps);
  // `step` counts from 0 (the first optimizer step).
  double at(int64_t step) const;

 private:
  config::LrScheduleConfig s_;
  double peak_;
  int64_t total_;
};

}  // namespace superoffload::train
