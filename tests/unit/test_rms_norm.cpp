// RMSNorm off the GPU's fused kernel (model/blocks/rms_norm.cpp): HF's chain forward, and a
// backward that recomputes it piece by piece from the input alone. Checked against the chain as
// autograd records it: the output and the input's gradient bit for bit, the weight's gradient
// to round-off (pieces summed in fp32), in fp32 and bf16, for hidden states and per-head
// (qk-norm) shapes, rows that do not divide into the pieces, strided inputs and a frozen weight
// or input; and by LibTorch's counted CPU allocations, that forward keeps nothing but its output
// and backward holds no whole-size temporary besides the input's gradient.
#include <gtest/gtest.h>

#include <torch/autograd.h>

#include "model/blocks/rms_norm.hpp"
#include "train/cpu_allocations.hpp"

namespace so = superoffload;

namespace {

constexpr double kEps = 1e-6;

at::Tensor chain(const at::Tensor& x, const at::Tensor& weight) {
  const auto input = x.to(at::kFloat);
  const auto variance = input.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (input * at::rsqrt(variance + kEps)).to(x.scalar_type());
}

struct Result {
  at::Tensor output, grad_x, grad_weight;
};

template <typename Norm>
Result run(Norm norm, const at::Tensor& x_values, const at::Tensor& w_values, const at::Tensor& grad, bool want_x,
           bool want_weight) {
  const auto x = x_values.detach().clone().requires_grad_(want_x);
  const auto weight = w_values.detach().clone().requires_grad_(want_weight);
  Result r;
  r.output = norm(x, weight);
  r.output.backward(grad);
  r.output = r.output.detach();
  r.grad_x = x.grad();
  r.grad_weight = weight.grad();
  return r;
}

void expect_equal_to_chain(const at::Tensor& x, at::ScalarType dtype, bool want_x = true, bool want_weight = true) {
  SCOPED_TRACE(::testing::Message() << "shape " << x.sizes() << ", " << c10::toString(dtype) << ", input "
                                    << (want_x ? "trained" : "frozen") << ", weight "
                                    << (want_weight ? "trained" : "frozen"));
  const auto xs = x.to(dtype);
  const auto weight = (1 + 0.1 * at::randn({x.size(-1)})).to(dtype);
  const auto grad = at::randn(x.sizes()).to(dtype);
  const auto keeping_input = [](const at::Tensor& a, const at::Tensor& w) {
    return so::model::rms_norm_keeping_input(a, w, kEps);
  };
  const auto lean = run(keeping_input, xs, weight, grad, want_x, want_weight);
  const auto recorded = run(chain, xs, weight, grad, want_x, want_weight);
  EXPECT_TRUE(at::equal(lean.output, recorded.output));
  ASSERT_EQ(lean.grad_x.defined(), want_x);
  ASSERT_EQ(lean.grad_weight.defined(), want_weight);
  if (want_x) {
    EXPECT_EQ(lean.grad_x.sizes(), x.sizes());
    EXPECT_TRUE(at::equal(lean.grad_x, recorded.grad_x));
  }
  if (want_weight) {
    EXPECT_EQ(lean.grad_weight.scalar_type(), dtype);
    const double scale = recorded.grad_weight.abs().max().item<double>();
    const double tolerance = dtype == at::kFloat ? 1e-5 : 2e-2;
    EXPECT_LE((lean.grad_weight.to(at::kFloat) - recorded.grad_weight.to(at::kFloat)).abs().max().item<double>(),
              tolerance * scale);
  }
}

}  // namespace

TEST(RmsNormKeepingInput, EqualsHfChainInFp32AndBf16) {
  at::manual_seed(0);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    expect_equal_to_chain(at::randn({2, 37, 64}), dtype);          // 74 rows: not a multiple of the pieces
    expect_equal_to_chain(at::randn({1, 300, 4, 16}), dtype);      // per head, as q_norm and k_norm
    expect_equal_to_chain(at::randn({5, 3, 32}).transpose(0, 1), dtype);  // strided
    expect_equal_to_chain(at::randn({3, 8}), dtype);               // fewer rows than pieces
    expect_equal_to_chain(at::randn({2, 37, 64}), dtype, true, false);
    expect_equal_to_chain(at::randn({2, 37, 64}), dtype, false, true);
  }
}

TEST(RmsNormKeepingInput, WithoutGradModeIsTheChain) {
  const auto x = at::randn({4, 16}).requires_grad_(), weight = at::randn({16}).requires_grad_();
  const at::NoGradGuard no_grad;
  const auto y = so::model::rms_norm_keeping_input(x, weight, kEps);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(at::equal(y, chain(x, weight)));
}

TEST(RmsNormKeepingInput, KeepsOnlyItsInputAndHoldsNoWholeTemporaryInBackward) {
  so::train::count_cpu_allocations();
  const int64_t rows = 8192, width = 256;
  const int64_t hidden_state = rows * width * 4;  // bytes of one fp32 [rows, width] tensor
  for (const bool lean : {true, false}) {
    SCOPED_TRACE(lean ? "rms_norm_keeping_input" : "the chain as autograd records it");
    const auto x = at::randn({rows, width}).requires_grad_();
    const auto weight = at::ones({width}).requires_grad_();
    const auto grad = at::randn({rows, width});
    const int64_t before = so::train::cpu_allocated_bytes();
    auto y = lean ? so::model::rms_norm_keeping_input(x, weight, kEps) : chain(x, weight);
    // What forward keeps for backward besides the output it returns (the per-row scalars are
    // 1/width of a hidden state).
    const int64_t kept = so::train::cpu_allocated_bytes() - before - hidden_state;
    if (lean) {
      EXPECT_LT(kept, hidden_state / 8);
    } else {
      EXPECT_GE(kept, hidden_state);  // the normalised tensor: what the test would catch
    }
    const int64_t before_backward = so::train::cpu_allocated_bytes();
    so::train::reset_cpu_allocation_peak();
    y.backward(grad);
    // Backward makes the input's gradient (one hidden state) and, lean, pieces of an eighth.
    const int64_t extra = so::train::cpu_allocated_peak_bytes() - before_backward - hidden_state;
    if (lean) {
      EXPECT_LT(extra, hidden_state);
    } else {
      EXPECT_GE(extra, hidden_state);
    }
  }
}
