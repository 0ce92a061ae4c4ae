// The text a person reads per step: the step line rank 0 logs every
// [logging] log_every_steps, and the optional wall-clock breakdown.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "optim/step_outcome.hpp"
#include "train/throughput.hpp"
#include "zero/engine_stats.hpp"

namespace superoffload::train {

struct StepLine {
  int64_t step = 0, total_steps = 0;  // 1-based step just completed
  double loss = 0, lr = 0, grad_norm = 0;
  double aux_loss = std::nan("");  // MoE load balancing (HF's aux_loss), shown when not NaN
  double step_s = 0;
  Throughput throughput;  // MFU and HFU are shown when known (non-zero)
  bool skipped = false;
  double eta_s = 0;
  bool evaluated = false;  // an evaluation after this step: its loss shown with its perplexity
  double eval_loss = 0;
  // resctrl (train/cache_partition.hpp): rank 0's optimizer threads' memory bandwidth over the
  // step, shown when not NaN, with the cap this run set on it (-1: none set).
  double optimizer_mem_gb_per_s = std::nan("");
  int optimizer_cap_percent = -1;
};

// "Step 12/100 | Loss 2.34561 | [Aux loss 2.01377 | ]LR 1.000e-04 | Grad norm 0.913 | Time 906 ms | Tokens/s 4520 (1130 per
// device) | TFLOPS 74.1 per device, 296 job | MFU 7.5% | HFU 10.0% [| Opt mem 41.2 GB/s (cap 80%) ]| ETA 0:01:02[ |
// Eval loss 2.41022 | ppl 11.14]".
// Loss with 6 significant digits, TFLOPS with 3 (from model FLOPs; HFU counts recomputation).
std::string format_step_line(const StepLine& line);
// " | Eval loss 2.41022 | ppl 11.14" (perplexity exp(loss), 4 significant digits).
std::string format_eval(double loss);
// "4520 (1130 per device)"-style numbers: `significant` digits, no exponent below 1e6.
std::string format_significant(double value, int significant);
// DeepSpeed's progress line ([logging] steps_per_print), as DeepSpeed prints it, so that scripts
// that read DeepSpeed logs read ours: "step=200, skipped=0, lr=[3e-05], mom=[(0.9, 0.999)]".
std::string format_deepspeed_progress(int64_t step, int64_t skipped, double lr, double beta1, double beta2);
// Where a step's wall-clock time went, on the host: what the phases above do not cover shows
// up as "untimed" in the part it lies in (on a GPU, mostly the host waiting for the device at
// a synchronisation no phase times).
struct StepWall {
  double step_s = 0;              // the whole step, as the step line shows it
  double data_s = 0;              // making this rank's micro-batches
  double forward_backward_s = 0;  // every micro-batch's forward and backward with its reductions
  double optimizer_s = 0;         // the optimizer's step end (finish_step)
};

// "  time breakdown (s): forward …, backward …; wall: data …, forward/backward … (untimed …), …"
// of the engine and the optimizer phases.
std::string format_breakdown(const zero::PhaseTimes& engine, const optim::OptimizerTimes& optimizer,
                             const StepWall& wall);

}  // namespace superoffload::train
