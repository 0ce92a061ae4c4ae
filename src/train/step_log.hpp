// The text a person reads per step: the step line rank 0 logs every
// [logging] log_every_steps, and the optional wall-clock breakdown.
#pragma once

#include <cstdint>
#include <string>

#include "optim/step_outcome.hpp"
#include "zero/engine_stats.hpp"

namespace superoffload::train {

struct StepLine {
  int64_t step = 0, total_steps = 0;  // 1-based step just completed
  double loss = 0, lr = 0, grad_norm = 0;
  double step_s = 0, tflops = 0, tokens_per_s = 0;
  double peak_tflops = 0;  // 0: MFU not shown
  bool skipped = false;
  double eta_s = 0;
};

// "Step 12/100 | Loss 2.3456 | LR 1.000e-04 | Grad norm 0.913 | Time 906 ms | ..."
std::string format_step_line(const StepLine& line);
// "  time breakdown (s): forward …, backward …" of the engine and the optimizer phases.
std::string format_breakdown(const zero::PhaseTimes& engine, const optim::OptimizerTimes& optimizer);

}  // namespace superoffload::train
