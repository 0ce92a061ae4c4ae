// [profile] step: one step measured layer by layer, on every rank, per phase (gather,
// forward, recompute, backward, reduce from the engine's LayerProfiler; optimizer from the
// optimizer's per-layer time), with each layer's FLOPs and achieved TFLOPS. Rank 0 writes it
// to metrics.h5 (/profile) and logs the slowest layers. DeepSpeed's flops_profiler imports here.
//
// FLOPs per layer follow the step's own count (train/throughput.hpp), split by layer: forward
// 2 × the layer's active parameters per token, plus 4·h·s per token in each decoder block
// (attention scores); backward twice the forward; the recompute of activation checkpointing
// once more for every layer but the head. The layers' parameter counts come from the
// partitioned layouts; the difference to the model's active count (experts a token does not
// use; a tied embedding) is spread evenly over the blocks, so the layers' model FLOPs add up
// to the step's model FLOPs exactly.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace superoffload::train {

inline constexpr size_t kProfileColumns = 6;
inline constexpr std::array<const char*, kProfileColumns> kProfileColumnNames = {
    "gather", "forward", "recompute", "backward", "reduce", "optimizer"};

struct LayerProfile {
  int64_t step = 0;  // 1-based
  int world = 1;
  std::vector<std::string> layers;     // Hugging Face prefixes
  std::vector<double> parameters;      // elements per layer
  std::vector<double> model_flops;     // per rank, this step: forward + backward (adds up to MFU's count)
  std::vector<double> executed_flops;  // and the recompute that ran
  std::vector<double> seconds;         // rank 0: [world][layers][kProfileColumns]; other ranks: their own row

  double mean_seconds(size_t layer, size_t column) const;
  // Executed FLOPs over the mean compute time (forward + recompute + backward), in TFLOPS.
  double achieved_tflops(size_t layer) const;
};

struct ProfileShape {
  std::vector<std::string> layers;
  std::vector<double> parameters;  // elements per layer (embedding first, head last)
  double active_parameters = 0;    // the model's, per token
  int64_t hidden = 0, seq_len = 0;
  bool activation_checkpointing = true;
  double tokens_per_rank = 0;      // this step's, all micro-batches
};

// The FLOPs columns of `profile` from the model's shape.
void count_layer_flops(const ProfileShape& shape, LayerProfile& profile);

// The printed table: the `top` slowest layers (mean over ranks) and the total.
std::string format_layer_profile(const LayerProfile& profile, size_t top);

}  // namespace superoffload::train
