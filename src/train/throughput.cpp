// Throughput arithmetic.
#include "train/throughput.hpp"

namespace superoffload::train {
namespace {

// One forward per token: 2 FLOPs per parameter, and the attention scores and weighted sum
// (2·s·h each, multiply and add) in every layer.
double forward_flops_per_token(const ThroughputInputs& in) {
  return 2.0 * in.active_parameters +
         4.0 * static_cast<double>(in.layers) * static_cast<double>(in.hidden) * static_cast<double>(in.seq_len);
}

}  // namespace

double model_flops_per_token(const ThroughputInputs& in) { return 3.0 * forward_flops_per_token(in); }

double hardware_flops_per_token(const ThroughputInputs& in) {
  return (in.activation_checkpointing ? 4.0 : 3.0) * forward_flops_per_token(in);
}

Throughput measure_throughput(const ThroughputInputs& in, double step_time_s, double peak) {
  Throughput t;
  if (step_time_s <= 0) return t;
  const double devices = in.world_size > 0 ? in.world_size : 1;
  t.tokens_per_s = static_cast<double>(in.samples_per_step * in.seq_len) / step_time_s;
  t.tokens_per_s_per_device = t.tokens_per_s / devices;
  t.model_tflops = model_flops_per_token(in) * t.tokens_per_s / 1e12;
  t.model_tflops_per_device = t.model_tflops / devices;
  t.hardware_tflops_per_device = hardware_flops_per_token(in) * t.tokens_per_s_per_device / 1e12;
  if (peak > 0) {
    t.mfu = t.model_tflops_per_device / peak;
    t.hfu = t.hardware_tflops_per_device / peak;
  }
  return t;
}

double peak_tflops(double configured, const std::string& gpu_name) {
  if (configured > 0) return configured;
  if (gpu_name.find("H100") != std::string::npos || gpu_name.find("GH200") != std::string::npos ||
      gpu_name.find("H200") != std::string::npos) {
    return 989.0;
  }
  if (gpu_name.find("B200") != std::string::npos || gpu_name.find("GB200") != std::string::npos) return 2250.0;
  if (gpu_name.find("A100") != std::string::npos) return 312.0;
  return 0.0;
}

}  // namespace superoffload::train
