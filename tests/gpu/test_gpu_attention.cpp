// On a GPU: packed documents in bf16 go through FlashAttention's variable-length kernel
// (model/blocks/attention.cpp), and its outputs and gradients equal those of the CPU's fp32
// path for the same inputs — the block-causal rule that tests/unit/test_model_contract.cpp
// checks against attention written out — to bf16 round-off, with GQA, a sliding window and
// documents of 1 to 300 tokens; and a window without documents (one document per row) equals
// the CPU's. Grouped kv heads without a mask reach a fused kernel as they are (no math
// fallback). Skipped without a GPU.
#include <ATen/SDPBackend.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include "model/blocks/attention.hpp"

namespace m = superoffload::model;

namespace {

TEST(GpuPackedAttention, VarlenFlashEqualsTheCpuRule) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible to LibTorch";
  at::manual_seed(7);
  const int64_t batch = 2, heads = 8, kv_heads = 2, dim = 64, seq = 512;
  auto documents = at::zeros({batch, seq}, at::kLong);
  // Row 0: documents of 300, 1, 150 and 61 tokens; row 1: one document.
  int64_t id = 0, at_token = 0;
  for (int64_t length : {300, 1, 150, 61}) {
    documents[0].narrow(0, at_token, length).fill_(id++);
    at_token += length;
  }
  for (const int64_t window : {int64_t{0}, int64_t{100}}) {
    auto q = at::randn({batch, heads, seq, dim}), k = at::randn({batch, kv_heads, seq, dim}),
         v = at::randn({batch, kv_heads, seq, dim}), weights = at::randn({batch, seq, heads * dim});
    // The reference: fp32 on the CPU (the rounded inputs, so that only the kernels differ).
    auto rounded = [](const at::Tensor& t) { return t.to(at::kBFloat16).to(at::kFloat).requires_grad_(); };
    auto cq = rounded(q), ck = rounded(k), cv = rounded(v);
    const auto reference = m::causal_attention(cq, ck, cv, window, documents);
    const auto reference_grads = torch::autograd::grad({(reference * weights).sum()}, {cq, ck, cv});
    auto on_gpu = [](const at::Tensor& t) { return t.to(at::kCUDA, at::kBFloat16).requires_grad_(); };
    auto gq = on_gpu(q), gk = on_gpu(k), gv = on_gpu(v);
    const auto ours = m::causal_attention(gq, gk, gv, window, documents.to(at::kCUDA));
    const auto grads = torch::autograd::grad({(ours * weights.to(at::kCUDA, at::kBFloat16)).sum()}, {gq, gk, gv});
    const std::string what = "window " + std::to_string(window);
    EXPECT_LT((ours.to(at::kCPU, at::kFloat) - reference).abs().max().item<double>(), 3e-2) << what;
    for (size_t i = 0; i < 3; ++i) {
      const auto expected = reference_grads[i];
      const auto error = (grads[i].to(at::kCPU, at::kFloat) - expected).abs().max().item<double>();
      EXPECT_LT(error, 3e-2 * std::max(1.0, expected.abs().max().item<double>())) << "gradient " << i << ", " << what;
    }
    // The documents matter: without them row 0's later documents attend across the boundaries.
    const auto causal = m::causal_attention(gq, gk, gv, window).to(at::kCPU, at::kFloat);
    EXPECT_GT((causal - reference).abs().max().item<double>(), 1e-1) << what;
    // Without documents a window goes through the same kernel, one document per row (no mask):
    // equal to the CPU's windowed attention.
    const auto cpu_rows = m::causal_attention(cq, ck, cv, window);
    EXPECT_LT((causal - cpu_rows).abs().max().item<double>(), 3e-2) << what << ", no documents";
  }
}

// causal_attention passes grouped kv heads to SDPA unrepeated when no mask is needed
// (enable_gqa). Where no fused kernel took them, SDPA would run its math path: [seq, seq]
// scores in memory and several times slower, with the same values (so no numeric test sees it).
TEST(GpuGroupedHeads, UnmaskedCausalAttentionRunsAFusedKernel) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible to LibTorch";
  const auto options = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const auto q = at::randn({2, 32, 1024, 128}, options), k = at::randn({2, 8, 1024, 128}, options);
  const auto chosen = static_cast<at::SDPBackend>(
      at::_fused_sdp_choice(q, k, k, {}, 0.0, /*is_causal=*/true, std::nullopt, /*enable_gqa=*/true));
  EXPECT_TRUE(chosen == at::SDPBackend::flash_attention || chosen == at::SDPBackend::cudnn_attention)
      << "SDPA chose backend " << static_cast<int>(chosen) << " (0 is the math path) for grouped kv heads";
}

}  // namespace
