// The expert half of a MoE layer on plain tensors, shared by the moe plugin, its tests and
// bench/bench_moe_layer: the routed (token, slot) pairs sorted by expert, the experts of each
// family computed on them — grouped (one product per projection for all experts, no host value)
// or as the per-expert loop it replaces (the reference) — and the outputs summed back per token.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace superoffload::plugins::moe {

// The (token, slot) pairs sorted by expert (stable: a token's slots keep their order).
struct RoutedPairs {
  at::Tensor order;   // the pairs' flat indices (token · top_k + slot), in expert order
  at::Tensor token;   // the token of each sorted pair
  at::Tensor weight;  // its routing weight
  at::Tensor expert;  // its expert
  at::Tensor ends;    // int32 [experts]: where each expert's pairs end, on the device
};

// From the router's choices: `indices` and `weights` [tokens, top_k].
RoutedPairs route_pairs(const at::Tensor& indices, const at::Tensor& weights, int64_t experts);

// The experts' outputs of the sorted pairs [pairs, hidden], weighted and summed per token:
// [tokens, hidden].
at::Tensor combine_pairs(const at::Tensor& outputs, const RoutedPairs& routed, int64_t top_k);

// SwiGLU experts with per-expert HF weights (Qwen3-MoE's gate/up/down_proj, Mixtral's w1/w3/
// w2): gate[e], up[e] [intermediate, hidden], down[e] [hidden, intermediate]. `input` holds the
// sorted pairs' hidden states [pairs, hidden].
at::Tensor swiglu_experts_grouped(const at::Tensor& input, const RoutedPairs& routed, const std::vector<at::Tensor>& gate,
                                  const std::vector<at::Tensor>& up, const std::vector<at::Tensor>& down);
at::Tensor swiglu_experts_loop(const at::Tensor& input, const RoutedPairs& routed, const std::vector<at::Tensor>& gate,
                               const std::vector<at::Tensor>& up, const std::vector<at::Tensor>& down);

// GPT-OSS's experts: gate_up [experts, hidden, 2 · intermediate] (gate and up interleaved)
// with its bias [experts, 2 · intermediate], down [experts, intermediate, hidden] with its bias
// [experts, hidden], and the clamped SwiGLU (alpha, limit) between.
struct ClampedSwiglu {
  at::Tensor gate_up, gate_up_bias, down, down_bias;
  double alpha = 1.702, limit = 7.0;
  at::Tensor activate(const at::Tensor& gate_up_rows) const;
};
at::Tensor clamped_experts_grouped(const at::Tensor& input, const RoutedPairs& routed, const ClampedSwiglu& experts);
at::Tensor clamped_experts_loop(const at::Tensor& input, const RoutedPairs& routed, const ClampedSwiglu& experts);

}  // namespace superoffload::plugins::moe
