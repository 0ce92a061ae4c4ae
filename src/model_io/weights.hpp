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
// What loading does with NaN or inf in a checkpoint's weights ([model] allow_non_finite_weights).
enum class NonFiniteWeights { refuse, allow };

// Copies one layer's parameters from `checkpoint` (read from the memory map, converted);
// returns the bytes of the stored tensors it read.
// Throws naming the first tensor that is not stored as a float type (MXFP4 blocks and scales:
// U8), whose shape differs, or (unless allowed) that holds a non-finite value.
size_t load_layer_weights(CausalLM& model, size_t layer, SafetensorsCheckpoint& checkpoint,
                          NonFiniteWeights non_finite = NonFiniteWeights::refuse);
// A run of one parameter's elements (flat, row-major) and the fp32 buffer they go to.
struct WeightRange {
  size_t parameter = 0;  // index into the layer's hf_parameters()
  int64_t begin = 0;     // first element within the parameter
  int64_t numel = 0;
  float* into = nullptr;
};

// Like load_layer_weights, but only `ranges` of the layer's parameters, converted to fp32 into
// their buffers: the bytes of the mapping outside them are never touched (a ZeRO rank reads its
// shard, not the model). MXFP4 tensors are dequantized whole, then cut. Returns the stored
// bytes read; the same refusals (type, shape, non-finite values within the ranges).
size_t load_layer_ranges(CausalLM& model, size_t layer, SafetensorsCheckpoint& checkpoint,
                         const std::vector<WeightRange>& ranges, NonFiniteWeights non_finite = NonFiniteWeights::refuse);
// check_weights, then every layer.
void load_weights(CausalLM& model, SafetensorsCheckpoint& checkpoint,
                  NonFiniteWeights non_finite = NonFiniteWeights::refuse);

}  // namespace superoffload::model
