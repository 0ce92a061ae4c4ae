// swiglu and SwigluMlp.
#include "model/blocks/swiglu.hpp"

#include <optional>

#include <torch/autograd.h>

#include "base/build_config.hpp"
#include "model/blocks/env_switch.hpp"
#include "model/blocks/stacked_weights.hpp"
#if SUPEROFFLOAD_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "model/blocks/swiglu_kernels.hpp"
#endif

namespace superoffload::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

#if SUPEROFFLOAD_WITH_CUDA
// `t` as a [rows, cols] matrix of contiguous columns and one row stride (a contiguous tensor, or
// a half of a gate_up product), for the kernels; nothing when its layout is another.
std::optional<cuda::Matrix> as_matrix(const at::Tensor& t) {
  if (t.dim() == 0 || t.stride(-1) != 1) return std::nullopt;
  const int64_t cols = t.size(-1), row_stride = t.dim() == 1 ? cols : t.stride(-2);
  int64_t expected = row_stride;  // each leading dimension must step over the ones after it
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) != 1 && t.stride(d) != expected) return std::nullopt;
    expected *= t.size(d);
  }
  return cuda::Matrix{t.data_ptr(), row_stride};
}

std::optional<cuda::ElementType> element_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return cuda::ElementType::f32;
    case at::kBFloat16: return cuda::ElementType::bf16;
    case at::kHalf: return cuda::ElementType::f16;
    default: return std::nullopt;
  }
}

// Whether the kernels take gate and up: on a GPU, in a float type, laid out as matrices, and not
// turned off (SUPEROFFLOAD_SWIGLU_KERNEL=never, for comparisons).
bool kernel_takes(const at::Tensor& gate, const at::Tensor& up) {
  return !env_switch_is("SUPEROFFLOAD_SWIGLU_KERNEL", "never") && gate.is_cuda() && element_type(gate.scalar_type()) && gate.scalar_type() == up.scalar_type() &&
         gate.sizes() == up.sizes() && as_matrix(gate) && as_matrix(up);
}

at::Tensor forward_on_gpu(const at::Tensor& gate, const at::Tensor& up) {
  const c10::cuda::CUDAGuard guard(gate.device());
  auto out = at::empty(gate.sizes(), gate.options());
  const int64_t cols = gate.size(-1), rows = cols == 0 ? 0 : gate.numel() / cols;
  cuda::swiglu_forward(*element_type(gate.scalar_type()), rows, cols, *as_matrix(gate), *as_matrix(up),
                       *as_matrix(out), c10::cuda::getCurrentCUDAStream(gate.device().index()).stream());
  return out;
}

// Writes into d_gate and d_up (matrices of gate's shape).
void backward_on_gpu(const at::Tensor& d_out, const at::Tensor& gate, const at::Tensor& up, at::Tensor& d_gate,
                     at::Tensor& d_up) {
  const c10::cuda::CUDAGuard guard(gate.device());
  const auto d_out_matrix = as_matrix(d_out) ? d_out : d_out.contiguous();
  const int64_t cols = gate.size(-1), rows = cols == 0 ? 0 : gate.numel() / cols;
  cuda::swiglu_backward(*element_type(gate.scalar_type()), rows, cols, *as_matrix(d_out_matrix), *as_matrix(gate),
                        *as_matrix(up), *as_matrix(d_gate), *as_matrix(d_up),
                        c10::cuda::getCurrentCUDAStream(gate.device().index()).stream());
}
#else
bool kernel_takes(const at::Tensor&, const at::Tensor&) { return false; }
at::Tensor forward_on_gpu(const at::Tensor&, const at::Tensor&) { return {}; }
void backward_on_gpu(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor&, at::Tensor&) {}
#endif

// gate and up as two tensors, through the kernels (only built where they take them).
struct SwigluPair : torch::autograd::Function<SwigluPair> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    ctx->save_for_backward({gate, up});
    return forward_on_gpu(gate, up);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto d_gate = at::empty(saved[0].sizes(), saved[0].options()), d_up = at::empty(saved[1].sizes(), saved[1].options());
    backward_on_gpu(grads[0], saved[0], saved[1], d_gate, d_up);
    return {d_gate, d_up};
  }
};

struct Swiglu : torch::autograd::Function<Swiglu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up) {
    const int64_t half = gate_up.size(-1) / 2;
    ctx->save_for_backward({gate_up});
    const auto gate = gate_up.narrow(-1, 0, half), up = gate_up.narrow(-1, half, half);
    if (kernel_takes(gate, up)) return forward_on_gpu(gate, up);
    return at::silu(gate) * up;
  }

  // The same operations autograd's chain runs (mul's two gradients, then silu's), so the
  // results are bitwise those of at::silu(gate) * up; written into the halves of one tensor.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto gate_up = ctx->get_saved_variables()[0];
    const auto& g = grads[0];
    const int64_t half = gate_up.size(-1) / 2;
    const auto gate = gate_up.narrow(-1, 0, half), up = gate_up.narrow(-1, half, half);
    auto d_gate_up = at::empty(gate_up.sizes(), gate_up.options());
    auto d_gate = d_gate_up.narrow(-1, 0, half), d_up = d_gate_up.narrow(-1, half, half);
    if (kernel_takes(gate, up)) {
      backward_on_gpu(g, gate, up, d_gate, d_up);
      return {d_gate_up};
    }
    at::mul_out(d_up, g, at::silu(gate));
    at::silu_backward_out(d_gate, g * up, gate);
    return {d_gate_up};
  }
};

}  // namespace

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  if (kernel_takes(gate, up)) return SwigluPair::apply(gate, up);
  return at::silu(gate) * up;  // autograd's chain: on the CPU, bit for bit what it always was
}

at::Tensor swiglu(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.size(-1) % 2 == 0, "swiglu: the last dimension (", gate_up.size(-1), ") is not gate and up");
  return Swiglu::apply(gate_up);
}

SwigluMlp::SwigluMlp(const SwigluMlpOptions& o) {
  if (o.fused) {
    gate_up_proj = register_module("gate_up_proj", std::make_shared<Linear>(o.hidden, 2 * o.intermediate, o.bias));
  } else {
    gate_proj = register_module("gate_proj", std::make_shared<Linear>(o.hidden, o.intermediate, o.bias));
    up_proj = register_module("up_proj", std::make_shared<Linear>(o.hidden, o.intermediate, o.bias));
  }
  down_proj = register_module("down_proj", std::make_shared<Linear>(o.intermediate, o.hidden, o.bias));
}

at::Tensor SwigluMlp::forward(const at::Tensor& x) const {
  if (gate_up_proj) return (*down_proj)(swiglu((*gate_up_proj)(x)));
  if (!gate_proj->bias.defined() && fuses_projections(x.device())) {
    // Gate and up back to back (a gathered layer): one product for both.
    if (const auto both = stacked_in_place({gate_proj->weight, up_proj->weight}); both.defined()) {
      return (*down_proj)(swiglu(at::linear(x, both)));
    }
  }
  return (*down_proj)(swiglu((*gate_proj)(x), (*up_proj)(x)));
}

}  // namespace superoffload::model
