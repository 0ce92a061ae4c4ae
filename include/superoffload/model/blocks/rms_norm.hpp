// RMSNorm as Llama/Qwen/Mistral define it: normalise in fp32, scale in the input dtype.
#pragma once

#include <ATen/ops/_fused_rms_norm.h>
#include <torch/nn/module.h>

namespace superoffload::model {

// HF's chain (fp32 inside, the weight's product in the input's dtype): its output and input's
// gradient bit for bit theirs, the weight's gradient to fp32 round-off. Under autograd it keeps
// only its input for backward, which recomputes the chain (src/model/blocks/rms_norm.cpp says
// what the recorded chain would keep).
at::Tensor rms_norm_keeping_input(const at::Tensor& x, const at::Tensor& weight, double eps);

class RMSNorm : public torch::nn::Module {
 public:
  RMSNorm(int64_t size, double eps) : eps_(eps) { weight = register_parameter("weight", at::ones({size})); }
  at::Tensor operator()(const at::Tensor& x) const {
    // On a GPU: LibTorch's fused kernel (one kernel forward and one backward, fp32 inside). HF's
    // chain (rms_norm_keeping_input) is eight kernels forward and more in backward; on the H200
    // the on-device 1.65B step spent about a third of its kernel time in such elementwise chains
    // and casts.
    // The fused kernel multiplies by the weight before its single rounding (HF rounds twice):
    // equal in fp32, within one bf16 ulp in bf16.
    if (x.is_cuda() && weight.scalar_type() == x.scalar_type()) {
      return std::get<0>(at::_fused_rms_norm(x, {x.size(-1)}, weight, eps_));
    }
    return rms_norm_keeping_input(x, weight, eps_);
  }

  at::Tensor weight;

 private:
  double eps_;
};

}  // namespace superoffload::model
