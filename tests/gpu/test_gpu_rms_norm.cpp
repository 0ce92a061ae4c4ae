// On a GPU, RMSNorm runs LibTorch's fused kernel (model/blocks/rms_norm.hpp); elsewhere HF's
// chain of elementwise operations. The fused output and the gradients of input and weight
// equal HF's chain computed on the CPU from the same values: to fp32 round-off in fp32, and in
// bf16 to the one rounding HF makes that the fused kernel does not. Skipped without a GPU.
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include "model/blocks/rms_norm.hpp"

namespace m = superoffload::model;

namespace {

TEST(GpuRmsNorm, FusedKernelEqualsHfChain) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible to LibTorch";
  at::manual_seed(11);
  const int64_t hidden = 2560;
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const auto x = at::randn({4, 333, hidden}).to(dtype).to(at::kFloat);  // values the dtype holds
    const auto w = (1 + 0.1 * at::randn({hidden})).to(dtype).to(at::kFloat);
    const auto upstream = at::randn({4, 333, hidden});
    m::RMSNorm cpu(hidden, 1e-5), gpu(hidden, 1e-5);
    cpu.weight.set_data(w.to(dtype));
    gpu.weight.set_data(w.to(at::kCUDA, dtype));
    auto cx = x.to(dtype).requires_grad_(), gx = x.to(at::kCUDA, dtype).requires_grad_();
    const auto reference = cpu(cx);
    const auto ours = gpu(gx);
    const auto rgrads = torch::autograd::grad({(reference.to(at::kFloat) * upstream).sum()}, {cx, cpu.weight});
    const auto grads = torch::autograd::grad({(ours.to(at::kFloat) * upstream.to(at::kCUDA)).sum()}, {gx, gpu.weight});
    const bool fp32 = dtype == at::kFloat;
    const std::string what = fp32 ? "fp32" : "bf16";
    auto relative = [](const at::Tensor& a, const at::Tensor& b) {
      return ((a.to(at::kCPU, at::kFloat) - b.to(at::kFloat)).abs().max() / b.to(at::kFloat).abs().max()).item<double>();
    };
    EXPECT_LT(relative(ours, reference), fp32 ? 1e-6 : 1e-2) << what << ": output";
    EXPECT_LT(relative(grads[0], rgrads[0]), fp32 ? 1e-5 : 2e-2) << what << ": input gradient";
    EXPECT_LT(relative(grads[1], rgrads[1]), fp32 ? 1e-5 : 2e-2) << what << ": weight gradient";
  }
}

}  // namespace
