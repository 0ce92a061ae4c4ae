// The experts of a MoE layer as grouped matrix products: the (token, slot) rows sorted by
// expert are multiplied by their expert's weight in one call (LibTorch's at::_grouped_mm, with
// the groups' end offsets kept on the device), in forward and in backward, so that no host
// value is needed and no expert is a call of its own.
//
// The weights of the per-expert HF modules (Qwen3-MoE's and Mixtral's experts.<e>.gate_proj
// …) become the one [experts, out, in] operand by model::stacked_weights (without a copy where
// ZeRO-3's gathered layer holds them).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace superoffload::plugins::moe {

// y[rows of group e] = x[rows of group e] · weight[e]ᵀ for x [rows, in] sorted by group,
// weight [experts, out, in] and `ends` the groups' end rows (int32, on x's device, the last
// equal to rows). Differentiable in x and weight.
at::Tensor grouped_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& ends);

// The product kernel behind grouped_linear, in both shapes it is used in: a [rows, k] · b
// [groups, k, n] -> [rows, n] per row group, and a [m, rows] · b [rows, n] -> [groups, m, n]
// per column group of a (the weight's gradient). at::_grouped_mm, except on the CPU where a
// product per group reads `ends` on the host (no synchronisation there) when that is faster
// (bench/bench_moe_layer), and wherever LibTorch's grouped kernel refuses the operands
// (dtype, layout, GPU architecture): then per group too, with one read of `ends`.
at::Tensor grouped_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& ends);

}  // namespace superoffload::plugins::moe
