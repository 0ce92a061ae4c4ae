// gradient_seed: a custom autograd function whose backward returns a stored gradient once.
#include "zero/gradient_seed.hpp"

#include <torch/autograd.h>

#include <utility>

#include "base/error.hpp"

namespace superoffload::zero {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SeedHolder : torch::CustomClassHolder {
  explicit SeedHolder(at::Tensor g) : gradient(std::move(g)) {}
  at::Tensor gradient;
};

struct GradientSeed : torch::autograd::Function<GradientSeed> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& output, const c10::intrusive_ptr<SeedHolder>& holder) {
    ctx->saved_data["holder"] = c10::IValue::make_capsule(holder);
    return at::zeros({}, output.options());
  }
  static variable_list backward(AutogradContext* ctx, variable_list /*one*/) {
    const auto holder = c10::static_intrusive_pointer_cast<SeedHolder>(ctx->saved_data["holder"].toCapsule());
    ctx->saved_data.erase("holder");
    SO_CHECK(holder->gradient.defined(), "gradient_seed: backward ran twice through one seed");
    at::Tensor gradient = std::move(holder->gradient);
    holder->gradient = at::Tensor();
    return {gradient, at::Tensor()};
  }
};

}  // namespace

at::Tensor gradient_seed(at::Tensor output, at::Tensor gradient) {
  SO_CHECK(output.requires_grad(), "gradient_seed: the output needs a gradient");
  SO_CHECK(gradient.sizes() == output.sizes(),
           "gradient_seed: a gradient of shape " << gradient.sizes() << " for an output of " << output.sizes());
  return GradientSeed::apply(output, c10::make_intrusive<SeedHolder>(std::move(gradient)));
}

}  // namespace superoffload::zero
