// y = x Wᵀ + b with HF's parameter names ("weight", "bias").
#pragma once

#include <torch/nn/module.h>

namespace superoffload::model {

class Linear : public torch::nn::Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias) {
    weight = register_parameter("weight", at::empty({out_features, in_features}));
    if (bias) this->bias = register_parameter("bias", at::zeros({out_features}));
  }
  at::Tensor operator()(const at::Tensor& x) const { return at::linear(x, weight, bias); }

  at::Tensor weight;
  at::Tensor bias;  // undefined without bias
};

}  // namespace superoffload::model
