// Throughput arithmetic.
#include "train/throughput.hpp"

namespace superoffload::train {

double tflops_per_sample(const ThroughputInputs& in) {
  const double c = in.activation_checkpointing ? 4.0 : 3.0;
  const double s = static_cast<double>(in.seq_len);
  return (2 * c * in.active_parameters * s + 4 * c * static_cast<double>(in.layers) * static_cast<double>(in.hidden) * s * s) /
         1e12;
}

double tflops_per_device(const ThroughputInputs& in, double step_time_s) {
  if (step_time_s <= 0) return 0;
  return tflops_per_sample(in) * static_cast<double>(in.samples_per_step) / step_time_s / in.world_size;
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
