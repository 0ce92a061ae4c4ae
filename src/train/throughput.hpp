// Throughput figures of the step log, the summary and metrics.h5, counted two ways:
//
//   model FLOPs     what the model needs per token, forward + backward, without any
//                   recomputation: 3·(2·N + 4·L·h·s) = 6·N + 12·L·h·s (PaLM's MFU
//                   convention; N parameters a token passes through — active ones for MoE —,
//                   L layers, h hidden size, s sequence length). MFU = model FLOPs / peak.
//   hardware FLOPs  what the device executes: one more forward under activation
//                   checkpointing, c·(2·N + 4·L·h·s) with c = 4, else 3. HFU = hardware FLOPs /
//                   peak. This is the TFLOPS figure of the SuperOffload examples.
//
// Tokens are the positions processed (samples × seq_len), for the job and per device.
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

// Forward + backward FLOPs per token.
double model_flops_per_token(const ThroughputInputs& in);
double hardware_flops_per_token(const ThroughputInputs& in);

struct Throughput {
  double tokens_per_s = 0, tokens_per_s_per_device = 0;
  double model_tflops = 0, model_tflops_per_device = 0;  // the job's, and per device
  double hardware_tflops_per_device = 0;
  double mfu = 0, hfu = 0;  // fractions of the peak; 0 when the peak is unknown
};

// The figures of one step (or of a mean step) of `step_time_s`; `peak` from peak_tflops().
Throughput measure_throughput(const ThroughputInputs& in, double step_time_s, double peak);

// The peak to compute MFU against: [runtime] peak_tflops, else bf16 dense of known GPUs
// (H100/GH200 989); 0 when unknown (CPU), and MFU is then not reported.
double peak_tflops(double configured, const std::string& gpu_name);

}  // namespace superoffload::train
