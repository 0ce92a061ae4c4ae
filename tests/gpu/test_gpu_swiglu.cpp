// On a GPU, SwiGLU runs one CUDA kernel each way (model/blocks/swiglu_kernels.hpp). Its output
// and the gradients of gate and up equal autograd's chain at::silu(gate) * up on the same GPU
// in fp32, bf16 and fp16: for separate gate and up and for the halves of one gate_up tensor
// (the kernels' 16-byte path), for odd columns and unaligned rows (their scalar path), and for a
// layout the kernels do not take (which keeps the chain). "Equal" allows one unit in the
// last place where nvcc contracts a multiply-add differently from LibTorch's kernels; the test
// prints how many elements differ at all. Skipped without a GPU.
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <iostream>

#include "model/blocks/swiglu.hpp"

namespace m = superoffload::model;

namespace {

// Largest difference in units of the dtype's last place at the reference's magnitude, and how
// many elements differ.
struct Difference {
  double ulps = 0;
  int64_t elements = 0;
};

Difference compare(const at::Tensor& ours, const at::Tensor& chain) {
  const auto a = ours.to(at::kCPU, at::kDouble), b = chain.to(at::kCPU, at::kDouble);
  const double epsilon = ours.scalar_type() == at::kFloat ? 1.2e-7 : ours.scalar_type() == at::kBFloat16 ? 7.9e-3 : 9.8e-4;
  // Near zero, a last place of the tensor's largest values' millionth (no division by zero).
  const auto scale = b.abs().clamp_min(b.abs().max().item<double>() * 1e-6 + 1e-30) * epsilon;
  return {((a - b).abs() / scale).max().item<double>(), a.ne(b).sum().item<int64_t>()};
}

void expect_chain(const at::Tensor& gate_in, const at::Tensor& up_in, bool stacked, const std::string& what) {
  // The chain's inputs are copies: the same values, their own graph.
  auto gate = gate_in.detach().clone().requires_grad_(), up = up_in.detach().clone().requires_grad_();
  const auto chain = at::silu(gate) * up;
  const auto upstream = at::randn_like(chain);
  const auto chain_grads = torch::autograd::grad({chain}, {gate, up}, {upstream});

  at::Tensor out, d_gate, d_up;
  if (stacked) {
    auto gate_up = at::cat({gate_in, up_in}, -1).detach().requires_grad_();
    out = m::swiglu(gate_up);
    const auto d = torch::autograd::grad({out}, {gate_up}, {upstream})[0];
    d_gate = d.narrow(-1, 0, gate_in.size(-1));
    d_up = d.narrow(-1, gate_in.size(-1), gate_in.size(-1));
  } else {
    auto g = gate_in.detach().clone().requires_grad_(), u = up_in.detach().clone().requires_grad_();
    out = m::swiglu(g, u);
    const auto grads = torch::autograd::grad({out}, {g, u}, {upstream});
    d_gate = grads[0];
    d_up = grads[1];
  }
  const Difference diffs[] = {compare(out, chain), compare(d_gate, chain_grads[0]), compare(d_up, chain_grads[1])};
  const char* names[] = {"output", "gate gradient", "up gradient"};
  for (int i = 0; i < 3; ++i) {
    std::cout << what << ", " << names[i] << ": " << diffs[i].elements << " of " << out.numel()
              << " elements differ, at most " << diffs[i].ulps << " units in the last place\n";
    EXPECT_LE(diffs[i].ulps, 1.01) << what << ", " << names[i];
  }
}

TEST(GpuSwiglu, KernelsEqualAutogradsChain) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible to LibTorch";
  at::manual_seed(5);
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const auto options = at::TensorOptions().device(at::kCUDA).dtype(dtype);
    const std::string name = c10::toString(dtype);
    // 3 × 77 rows of 1000: not a multiple of any block; values across silu's whole curve.
    const auto gate = 4 * at::randn({3, 77, 1000}, options), up = at::randn({3, 77, 1000}, options);
    expect_chain(gate, up, /*stacked=*/false, name + ", separate");
    expect_chain(gate, up, /*stacked=*/true, name + ", one gate_up tensor");
    // The kernels' scalar path: columns not a whole number of 16-byte packs, and rows that do
    // not start on 16 bytes (a view one element in); the cases above take the packed path.
    const auto odd_gate = 4 * at::randn({77, 1001}, options), odd_up = at::randn({77, 1001}, options);
    expect_chain(odd_gate, odd_up, /*stacked=*/false, name + ", 1001 columns");
    const auto wide_gate = 4 * at::randn({77, 1001}, options), wide_up = at::randn({77, 1001}, options);
    expect_chain(wide_gate.narrow(1, 1, 1000), wide_up.narrow(1, 1, 1000), /*stacked=*/false,
                 name + ", rows one element off 16 bytes");
    // Transposed: no row stride describes it; the chain runs instead.
    expect_chain(gate.transpose(0, 1), up.transpose(0, 1), /*stacked=*/false, name + ", transposed");
  }
}

}  // namespace
