// Throughput figures of the step log line. TFLOPS follow the SuperOffload examples: per
// sample (2·c·N·s + 4·c·L·h·s²) / 1e12 with c = 4 under activation checkpointing, else 3
// (N parameters — active ones for MoE —, L layers, h hidden size, s sequence length), times
// samples per step over step time, per device.
#pragma once

#include <cstdint>
#include <string>

namespace superoffload::train {

struct ThroughputInputs {
  double active_parameters = 0;
  int64_t layers = 0, hidden = 0, seq_len = 0;
  bool activation_checkpointing = true;
  int64_t samples_per_step = 0;  // global batch
  int world_size = 1;
};

double tflops_per_sample(const ThroughputInputs& in);
// TFLOPS achieved per device for one step of `step_time_s`.
double tflops_per_device(const ThroughputInputs& in, double step_time_s);
// The peak to compute MFU against: [runtime] peak_tflops, else bf16 dense of known GPUs
// (H100/GH200 989); 0 when unknown (CPU), and MFU is then not reported.
double peak_tflops(double configured, const std::string& gpu_name);

}  // namespace superoffload::train
