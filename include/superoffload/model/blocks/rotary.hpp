// Rotary position embedding (RoPE): the default form, "linear" scaling, Llama 3's
// frequency-dependent scaling ("llama3") and YaRN ("yarn", GPT-OSS), with partial rotary
// dimensions. Reads both the
// current `rope_parameters` form of config.json and the older `rope_theta` + `rope_scaling`.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <mutex>
#include <utility>

namespace superoffload::model {

class HfConfig;

class Rotary {
 public:
  // `defaults`: the architecture's RoPE settings when config.json has none (e.g. GPT-OSS's YaRN).
  Rotary(const HfConfig& config, int64_t head_dim, const nlohmann::json& defaults = {});
  // cos and sin [batch, seq, rotary_dim] for positions [batch, seq], in `dtype`. Every layer
  // asks with the micro-batch's one position_ids tensor (BatchContext), forward and recompute:
  // the answer for the last tensor asked about is kept and returned again while that tensor is
  // unchanged, so a micro-batch computes it once, as HF's model-level rotary embedding does.
  std::pair<at::Tensor, at::Tensor> cos_sin(const at::Tensor& position_ids, at::ScalarType dtype) const;
  // Rotates the first rotary_dim channels of x [batch, heads, seq, head_dim].
  static at::Tensor apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  int64_t rotary_dim() const { return rotary_dim_; }

 private:
  at::Tensor inv_freq_;  // [rotary_dim / 2] fp32, on the CPU
  // The last answer of cos_sin and what it answered. `positions` holds that tensor alive, so no
  // other tensor can take its identity while it is kept; its version counter catches in-place
  // changes. `inv_freq` is inv_freq_ on the device last asked about: a copy from pageable host
  // memory in every layer made the host wait for the device each time (the H200 traces).
  struct Cached {
    at::Tensor positions;
    uint32_t version = 0;
    at::ScalarType dtype = at::kFloat;
    at::Tensor cos, sin, inv_freq;
  };
  mutable std::mutex cache_mutex_;
  mutable Cached cached_;
  int64_t rotary_dim_ = 0;
  double attention_scaling_ = 1.0;
};

}  // namespace superoffload::model
