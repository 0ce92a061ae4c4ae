// Step log formatting.
#include "train/step_log.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace superoffload::train {
namespace {

// "1:02:03"
std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return text;
}

}  // namespace

std::string format_significant(double value, int significant) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*g", significant, value);
  if (std::strchr(text, 'e') && std::abs(value) >= 1 && std::abs(value) < 1e15) {
    std::snprintf(text, sizeof text, "%.0f", value);  // large values: all integer digits
  }
  return text;
}

std::string format_step_line(const StepLine& l) {
  std::ostringstream line;
  const auto& t = l.throughput;
  line << "Step " << l.step << "/" << l.total_steps << " | Loss " << format_significant(l.loss, 6);
  if (!std::isnan(l.aux_loss)) line << " | Aux loss " << format_significant(l.aux_loss, 6);
  line.precision(3);
  line << std::scientific << " | LR " << l.lr << std::fixed << " | Grad norm " << l.grad_norm;
  line.precision(0);
  line << " | Time " << l.step_s * 1000 << " ms";
  line << " | Tokens/s " << format_significant(t.tokens_per_s, 3) << " (" << format_significant(t.tokens_per_s_per_device, 3)
       << " per device)";
  line << " | TFLOPS " << format_significant(t.model_tflops_per_device, 3) << " per device, "
       << format_significant(t.model_tflops, 3) << " job";
  line.precision(1);
  if (t.mfu > 0) line << " | MFU " << 100 * t.mfu << "%";
  if (t.hfu > 0) line << " | HFU " << 100 * t.hfu << "%";
  if (l.skipped) line << " | skipped (non-finite)";
  if (!std::isnan(l.optimizer_mem_gb_per_s)) {
    line << " | Opt mem " << format_significant(l.optimizer_mem_gb_per_s, 3) << " GB/s";
    if (l.optimizer_cap_percent >= 0) {
      line << (l.optimizer_cap_percent >= 100 ? " (uncapped)" : " (cap " + std::to_string(l.optimizer_cap_percent) + "%)");
    }
  }
  line << " | ETA " << format_duration(l.eta_s);
  if (l.evaluated) line << format_eval(l.eval_loss);
  return line.str();
}

std::string format_eval(double loss) {
  return " | Eval loss " + format_significant(loss, 6) + " | ppl " + format_significant(std::exp(loss), 4);
}

std::string format_breakdown(const zero::PhaseTimes& e, const optim::OptimizerTimes& o, const StepWall& w) {
  std::ostringstream text;
  text << "  time breakdown (s): forward " << e.forward_s << ", backward " << e.backward_s << ", gather wait "
       << e.gather_wait_s << ", reduce " << e.reduce_s << " (wait " << e.reduce_wait_s << "), d2h " << o.d2h_s << ", cpu_step " << o.cpu_step_s
       << " (after backward " << o.cpu_late_s << "), device_step " << o.device_step_s << ", h2d " << o.h2d_s << ", wait "
       << o.wait_s << ", rollback " << o.rollback_s << ", norm " << o.norm_s;
  // The phases in each part of the step; the rest of each part is untimed. The CPU steps taken
  // during backward run beside it on the optimizer's threads: only the late ones count here.
  const double in_forward_backward = e.forward_s + e.backward_s + e.gather_wait_s + e.reduce_s;
  const double in_optimizer = o.norm_s + o.wait_s + o.rollback_s + o.cpu_late_s + o.device_step_s + o.h2d_s + o.d2h_s;
  // Seconds to the millisecond; a difference within rounding of zero shows as 0.000, not -0.000.
  auto ms = [](double seconds) { return std::abs(seconds) < 5e-4 ? 0.0 : seconds; };
  text.precision(3);
  text << std::fixed << "; wall: data " << ms(w.data_s) << ", forward/backward " << ms(w.forward_backward_s)
       << " (untimed " << ms(w.forward_backward_s - in_forward_backward) << "), optimizer " << ms(w.optimizer_s)
       << " (untimed " << ms(w.optimizer_s - in_optimizer) << "), rest of the step "
       << ms(w.step_s - w.data_s - w.forward_backward_s - w.optimizer_s);
  return text.str();
}

std::string format_deepspeed_progress(int64_t step, int64_t skipped, double lr, double beta1, double beta2) {
  std::ostringstream out;
  out << "step=" << step << ", skipped=" << skipped << ", lr=[" << lr << "], mom=[(" << beta1 << ", " << beta2 << ")]";
  return out.str();
}

}  // namespace superoffload::train
