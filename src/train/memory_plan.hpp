// What a run needs in memory before it allocates anything, from the model's config.json and
// the configuration: per rank on the device (bf16 parameter shards, fp32 gradient shards,
// gathered layers, saved activations and the recompute of one layer, loss logits, the
// device share of the optimizer) and on the host (fp32 master weights, Adam moments, gradient
// and bf16 staging of the CPU share, pinned). `train` refuses a run that cannot fit at start-up;
// `superoffload plan` prints the same estimate for a cluster shape the user does not have yet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace superoffload::train {

struct ModelSize {
  std::string architecture;
  int64_t parameters = 0;         // all
  int64_t active_parameters = 0;  // per token (MoE: routed top-k)
  int64_t largest_layer = 0;      // parameters of the largest layer (embedding, block or head)
  int64_t layers = 0, hidden = 0, intermediate = 0, vocab = 0;
};

// Parameter counts of a decoder (Llama-like, MoE or GPT-2) from its HF config.json.
ModelSize model_size_from_config(const std::string& model_dir);

struct MemoryPlan {
  int ranks = 1;
  bool on_gpu = true;
  // Per rank.
  double device_parameter_bytes = 0, device_gradient_bytes = 0, device_gathered_bytes = 0,
         device_activation_bytes = 0, device_optimizer_bytes = 0;
  double host_optimizer_bytes = 0, host_setup_bytes = 0;
  // [offload] device = "nvme": the CPU share's master and moments, in the rank's file under
  // nvme_path (host_optimizer_bytes then holds the gradient copies and the buffer ring).
  double nvme_bytes = 0;
  double device_total() const {
    return device_parameter_bytes + device_gradient_bytes + device_gathered_bytes + device_activation_bytes +
           device_optimizer_bytes;
  }
  double host_total() const { return host_optimizer_bytes + host_setup_bytes; }
};

MemoryPlan plan_memory(const ModelSize& model, const config::Config& config, int ranks, bool on_gpu);

// The estimate as a table (per GPU/rank and per node), and, with capacities > 0, whether it fits.
std::vector<std::string> describe_plan(const ModelSize& model, const MemoryPlan& plan, int ranks_per_node,
                                       double device_capacity_bytes, double host_capacity_per_node_bytes);

// Bytes of memory this node can give the job (MemAvailable).
double available_host_bytes();

}  // namespace superoffload::train
