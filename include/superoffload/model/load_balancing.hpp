// The mixture-of-experts load-balancing loss as HF transformers defines it
// (load_balancing_loss_func of Mixtral, Qwen3-MoE and GPT-OSS): the router outputs of all MoE
// layers of one forward pass are pooled before the product is taken,
//
//   aux = E · Σ_e f_e · P_e,   f_e = Σ_k (tokens whose k-th choice is e) / (L·T),
//                              P_e = Σ_tokens probability_e / (L·T),
//
// over the L MoE layers and T tokens of the pass (k for a perfectly balanced router). HF
// returns it as `aux_loss` and adds router_aux_loss_coef · aux to the training loss. Every layer sees the same T tokens, so the
// pooled means are the means over layers of each layer's RouterStatistics. Only P carries a
// gradient (f counts choices), and aux is linear in each layer's P given the pooled f: the
// engine runs the layers one at a time and hands each its share of the gradient in backward.
#pragma once

#include <vector>

#include "model/causal_lm.hpp"

namespace superoffload::model {

struct LoadBalancing {
  double loss = 0;         // aux above, unweighted as HF's aux_loss (0 without layers)
  double coefficient = 0;  // router_aux_loss_coef
  at::Tensor gradient;     // [E]: ∂(coefficient · aux) / ∂(one layer's probability), the same for every layer
};

// From the statistics of every MoE layer of one forward pass (their tensors may or may not
// carry graphs; neither is used). Layers must agree on E and the coefficient.
LoadBalancing load_balancing(const std::vector<RouterStatistics>& layers);

// A router's statistics from its logits [T, E] (any dtype): softmax in fp32, the top-k choices
// counted, the probabilities averaged with their graph; the choices are those of the
// probabilities, whatever top-k normalisation the layer applies to its routing weights after.
RouterStatistics router_statistics(const at::Tensor& logits, int64_t top_k, double coefficient);

}  // namespace superoffload::model
