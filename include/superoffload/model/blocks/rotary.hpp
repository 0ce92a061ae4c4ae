// Rotary position embedding (RoPE): the default form, "linear" scaling, Llama 3's
// frequency-dependent scaling ("llama3") and YaRN ("yarn", GPT-OSS), with partial rotary
// dimensions. Reads both the
// current `rope_parameters` form of config.json and the older `rope_theta` + `rope_scaling`.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <utility>

namespace superoffload::model {

class HfConfig;

class Rotary {
 public:
  // `defaults`: the architecture's RoPE settings when config.json has none (e.g. GPT-OSS's YaRN).
  Rotary(const HfConfig& config, int64_t head_dim, const nlohmann::json& defaults = {});
  // cos and sin [batch, seq, rotary_dim] for positions [batch, seq], in `dtype`.
  std::pair<at::Tensor, at::Tensor> cos_sin(const at::Tensor& position_ids, at::ScalarType dtype) const;
  // Rotates the first rotary_dim channels of x [batch, heads, seq, head_dim].
  static at::Tensor apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  int64_t rotary_dim() const { return rotary_dim_; }

 private:
  at::Tensor inv_freq_;  // [rotary_dim / 2] fp32
  int64_t rotary_dim_ = 0;
  double attention_scaling_ = 1.0;
};

}  // namespace superoffload::model
