// Loading HF safetensors weights into a model's parameters (dtype-converting copies), with
// every missing or unexpected tensor name listed.
#pragma once

#include <ATen/ATen.h>

#include "model/causal_lm.hpp"
#include "model/safetensors.hpp"

namespace superoffload::model {

at::ScalarType scalar_type_of(DType dtype);
DType dtype_of(at::ScalarType type);

// A tensor sharing the mapped bytes of `view` (no copy; valid while its file is open).
at::Tensor as_tensor(const TensorView& view);

// Copies every parameter of `model` from `checkpoint`. Throws naming the missing and
// unexpected tensors, or the first tensor whose shape differs.
void load_weights(CausalLM& model, SafetensorsCheckpoint& checkpoint);

}  // namespace superoffload::model
