// Several projections' weights as one matrix-product operand, without a copy where ZeRO-3's
// gathered buffer already holds them back to back (it lays a layer's parameters out in their
// HF order: q, k, v; gate, up; expert after expert). One product then replaces several — one
// GEMM for q/k/v and one for gate/up in forward, and one each for the input's and the weights'
// gradients in backward — while every weight still receives its own slice of the gradient.
//
// It does not pay for the blocks' projections: bench/bench_fused_projections measured fused/
// separate 0.999-1.016x on a Sapphire Rapids CPU (Llama-3.2-1B block, fp32) and 0.949x / 0.959x
// on an H100 (Llama-3.1-8B block, bf16, 4,096 / 8,192 tokens; 2026-11-28), and on a CPU the other
// shapes move the parity tests off their references. The experts' grouped products need it.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace superoffload::model {

// Whether the blocks fuse their projections for inputs on `device`: by default nowhere (see
// above). SUPEROFFLOAD_FUSED_PROJECTIONS = "always" | "never" overrides it (tests, benchmarks).
bool fuses_projections(const at::Device& device);

// [Σ rows, in]: the 2-D `weights` [rows_i, in] stacked along their rows, as a tensor on their
// own storage — or an undefined tensor when they do not lie back to back, contiguous, in one
// buffer (on a GPU also 16-byte aligned), e.g. in a model built outside the engine: the caller
// then multiplies by each weight on its own rather than copy them. Differentiable in every
// weight.
at::Tensor stacked_in_place(const std::vector<at::Tensor>& weights);

// [groups, Σ_p rows_p, in] from `parts` weights per group: weights[g · parts + p] is group g's
// projection p, [rows_p, in] (a mixture of experts: one group per expert, gate and up its
// parts). A view where the groups lie at one stride in one buffer, each group's parts
// adjacent; otherwise stacked by a copy. Differentiable in every weight.
at::Tensor stacked_weights(const std::vector<at::Tensor>& weights, int64_t parts);

}  // namespace superoffload::model
