// RMSNorm as Llama/Qwen/Mistral define it: normalise in fp32, scale in the input dtype.
#pragma once

#include <torch/nn/module.h>

namespace superoffload::model {

class RMSNorm : public torch::nn::Module {
 public:
  RMSNorm(int64_t size, double eps) : eps_(eps) { weight = register_parameter("weight", at::ones({size})); }
  at::Tensor operator()(const at::Tensor& x) const {
    const auto input = x.to(at::kFloat);
    const auto variance = input.pow(2).mean(-1, /*keepdim=*/true);
    return weight * (input * at::rsqrt(variance + eps_)).to(x.scalar_type());
  }

  at::Tensor weight;

 private:
  double eps_;
};

}  // namespace superoffload::model
