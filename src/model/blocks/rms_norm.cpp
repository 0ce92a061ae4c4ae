// rms_norm_keeping_input: HF's RMSNorm chain with a backward that recomputes it.
#include "model/blocks/rms_norm.hpp"

#include <torch/autograd.h>

#include <algorithm>
#include <vector>

namespace superoffload::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// HF's chain, op for op: normalise in fp32, scale in the input's dtype.
at::Tensor hf_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const auto input = x.to(at::kFloat);
  const auto variance = input.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (input * at::rsqrt(variance + eps)).to(x.scalar_type());
}

// Backward's recompute runs over pieces of the rows: at most about a million values each (4 MiB
// in fp32), and at least kPieces of them, so the recomputed chain's temporaries stay small
// beside a hidden state at any length and width. On a GPU (where this runs only when the weight's
// dtype is not the input's) pieces are 16 times larger: each piece is about ten kernel launches.
constexpr int64_t kValuesPerPiece = int64_t{1} << 20, kValuesPerPieceOnGpu = int64_t{1} << 24;
constexpr int64_t kPieces = 8;

// Recorded by autograd, the chain keeps the normalised tensor (for the weight's gradient) beside
// its output, and in bf16 also an fp32 copy of the input: one to three hidden states per norm
// held from a layer's forward to its backward, where LibTorch's fused CUDA kernel keeps the
// input and one scalar per token (rms_norm.hpp). This function keeps only the input. Backward
// recomputes the chain under autograd piece by piece along the rows, so the input's gradient
// is the chain's bit for bit and no whole-size temporary exists; the weight's gradient sums the
// pieces' in fp32 (the chain sums all rows at once: equal to fp32 round-off).
struct KeepingInput : torch::autograd::Function<KeepingInput> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    ctx->save_for_backward({x, weight});
    ctx->saved_data["eps"] = eps;
    return hf_rms_norm(x, weight, eps);  // no graph inside a custom function's forward
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const bool want_x = ctx->needs_input_grad(0), want_weight = ctx->needs_input_grad(1);
    variable_list grads(3);
    if (!grad_outputs[0].defined() || !(want_x || want_weight)) return grads;
    const double eps = ctx->saved_data["eps"].toDouble();
    const int64_t width = saved[0].size(-1);
    const auto rows_of = [width](const at::Tensor& t) { return t.reshape({-1, width}); };
    const auto x = rows_of(saved[0]), grad = rows_of(grad_outputs[0]);
    // Detached leaves: the parameter's own hooks (ZeRO's gradient hand-off) see only the
    // gradient this function returns, once.
    const auto weight = saved[1].detach().requires_grad_(want_weight);
    at::Tensor grad_x = want_x ? at::empty_like(x) : at::Tensor();
    at::Tensor grad_weight = want_weight ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
    const int64_t rows = x.size(0);
    const int64_t most = (x.is_cuda() ? kValuesPerPieceOnGpu : kValuesPerPiece) / std::max<int64_t>(width, 1);
    const int64_t piece = std::max<int64_t>(1, std::min(most, (rows + kPieces - 1) / kPieces));
    for (int64_t begin = 0; begin < rows; begin += piece) {
      const int64_t length = std::min(piece, rows - begin);
      const auto x_piece = x.narrow(0, begin, length).detach().requires_grad_(want_x);
      at::Tensor output;
      {
        const torch::AutoGradMode with_graph(true);
        output = hf_rms_norm(x_piece, weight, eps);
      }
      std::vector<at::Tensor> leaves;
      if (want_x) leaves.push_back(x_piece);
      if (want_weight) leaves.push_back(weight);
      const auto computed = torch::autograd::grad({output}, leaves, {grad.narrow(0, begin, length)});
      if (want_x) grad_x.narrow(0, begin, length).copy_(computed[0]);
      if (want_weight) grad_weight.add_(computed.back());
    }
    if (want_x) grads[0] = grad_x.view(saved[0].sizes());
    if (want_weight) grads[1] = grad_weight.to(weight.scalar_type());
    return grads;
  }
};

}  // namespace

at::Tensor rms_norm_keeping_input(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!at::GradMode::is_enabled() || !(x.requires_grad() || weight.requires_grad())) {
    return hf_rms_norm(x, weight, eps);
  }
  return KeepingInput::apply(x, weight, eps);
}

}  // namespace superoffload::model
