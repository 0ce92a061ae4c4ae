// Loading HF safetensors weights into a model's parameters (dtype-converting copies), with
// every missing or unexpected tensor name listed.
#pragma once

#include <ATen/ATen.h>

#include "model/causal_lm.hpp"
#include "model_io/safetensors.hpp"

namespace superoffload::model {

at::ScalarType scalar_type_of(DType dtype);
DType dtype_of(at::ScalarType type);

// A tensor sharing the mapped bytes of `view` (no copy; valid while its file is open).
at::Tensor as_tensor(const TensorView& view);

// Checks that `checkpoint` has exactly the model's tensors; throws naming the missing and
// unexpected ones.
void check_weights(const CausalLM& model, SafetensorsCheckpoint& checkpoint);
// Copies one layer's parameters from `checkpoint` (read from the memory map, converted).
// Throws naming the first tensor whose shape differs.
void load_layer_weights(CausalLM& model, size_t layer, SafetensorsCheckpoint& checkpoint);
// check_weights, then every layer.
void load_weights(CausalLM& model, SafetensorsCheckpoint& checkpoint);

}  // namespace superoffload::model
