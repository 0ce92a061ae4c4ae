// Backward from a layer's output without keeping the output, or the gradient coming into it,
// alive through the layer's whole backward. torch::autograd::backward(output, gradient) holds
// both until it returns (its caller's handles, and the gradient again in the engine's root), so
// at a block's backward peak — its attention's backward, after the MLP's — they were two hidden
// states of the row beside the peak's own (tests/zero/activation_memory.cpp). A seed is a scalar
// whose node hands the gradient to the output's node, once, and lets go of it: the caller drops
// both tensors and calls backward on the seed, and the gradient is freed as soon as the nodes
// that take it are done. The arithmetic is unchanged.
#pragma once

#include <ATen/ATen.h>

namespace superoffload::zero {

// A 0-dim tensor whose backward (with gradient 1) is `output`'s backward with `gradient`.
// `output` must need a gradient; `gradient` must be shaped like it. Both are taken over: pass
// them with std::move so that nothing else keeps them.
at::Tensor gradient_seed(at::Tensor output, at::Tensor gradient);

}  // namespace superoffload::zero
