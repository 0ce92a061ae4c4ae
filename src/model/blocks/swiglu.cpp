// swiglu and SwigluMlp.
#include "model/blocks/swiglu.hpp"

#include <torch/autograd.h>

#include "model/blocks/stacked_weights.hpp"

namespace superoffload::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Swiglu : torch::autograd::Function<Swiglu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up) {
    const int64_t half = gate_up.size(-1) / 2;
    ctx->save_for_backward({gate_up});
    return at::silu(gate_up.narrow(-1, 0, half)) * gate_up.narrow(-1, half, half);
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
    at::mul_out(d_up, g, at::silu(gate));
    at::silu_backward_out(d_gate, g * up, gate);
    return {d_gate_up};
  }
};

}  // namespace

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
  return (*down_proj)(at::silu((*gate_proj)(x)) * (*up_proj)(x));
}

}  // namespace superoffload::model
