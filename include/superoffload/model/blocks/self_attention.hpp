// Grouped-query causal self-attention with the options of the HF decoder families:
// separate or fused (Phi3 qkv_proj) projections, q/k/v and output biases, per-head q/k
// RMSNorm (Qwen3), sliding windows and learned attention sinks (GPT-OSS). Module names are
// HF's: q_proj, k_proj, v_proj | qkv_proj, o_proj, q_norm, k_norm, sinks.
#pragma once

#include <torch/nn/module.h>

#include "model/blocks/linear.hpp"
#include "model/causal_lm.hpp"
#include "model/blocks/rms_norm.hpp"

namespace superoffload::model {

struct SelfAttentionOptions {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool qkv_bias = false, o_bias = false;
  bool fused_qkv = false;
  bool qk_norm = false;
  double norm_eps = 1e-6;
  bool sinks = false;
};

class SelfAttention : public torch::nn::Module {
 public:
  explicit SelfAttention(const SelfAttentionOptions& options);
  // x [batch, seq, hidden] (this rank's shard of each row under sequence parallelism); cos/sin
  // from Rotary::cos_sin of the context's position_ids; sliding_window 0 = full causal. The
  // context's document_ids and sequence-parallel group decide what a token sees.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t sliding_window,
                     const BatchContext& context);

  std::shared_ptr<Linear> q_proj, k_proj, v_proj, qkv_proj, o_proj;
  std::shared_ptr<RMSNorm> q_norm, k_norm;
  at::Tensor sinks;  // [heads], when enabled

 private:
  SelfAttentionOptions o_;
};

}  // namespace superoffload::model
