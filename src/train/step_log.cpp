// Step log formatting.
#include "train/step_log.hpp"

#include <cstdio>
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

std::string format_step_line(const StepLine& l) {
  std::ostringstream line;
  line.setf(std::ios::fixed);
  line.precision(4);
  line << "Step " << l.step << "/" << l.total_steps << " | Loss " << l.loss;
  line.precision(3);
  line << std::scientific << " | LR " << l.lr << std::fixed << " | Grad norm " << l.grad_norm;
  line.precision(0);
  line << " | Time " << l.step_s * 1000 << " ms";
  line.precision(2);
  line << " | TFLOPS " << l.tflops;
  line.precision(0);
  line << " | Tokens/s " << l.tokens_per_s;
  if (l.peak_tflops > 0) {
    line.precision(1);
    line << " | MFU " << 100 * l.tflops / l.peak_tflops << "%";
  }
  if (l.skipped) line << " | skipped (non-finite)";
  line << " | ETA " << format_duration(l.eta_s);
  return line.str();
}

std::string format_breakdown(const zero::PhaseTimes& e, const optim::OptimizerTimes& o) {
  std::ostringstream text;
  text << "  time breakdown (s): forward " << e.forward_s << ", backward " << e.backward_s << ", gather wait "
       << e.gather_wait_s << ", reduce " << e.reduce_s << ", d2h " << o.d2h_s << ", cpu_step " << o.cpu_step_s
       << ", device_step " << o.device_step_s << ", h2d " << o.h2d_s << ", wait " << o.wait_s << ", rollback "
       << o.rollback_s;
  return text.str();
}

}  // namespace superoffload::train
