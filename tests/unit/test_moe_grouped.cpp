// The moe plugin's grouped experts (plugins/moe/grouped_gemm.hpp) against its per-expert loop
// (SUPEROFFLOAD_MOE_EXPERTS=loop), to fp32 round-off in the layer's output and in every
// gradient, for Qwen3-MoE, Mixtral and GPT-OSS: experts no token reaches, every token on the
// same experts (a router that cannot tell tokens apart), top-k = every expert, and rows of
// padding beside real tokens. Both grouped kernels run (LibTorch's at::_grouped_mm and the
// product per group). The operand of the experts' weights is a view, not a copy, when they lie
// in one buffer as ZeRO-3 gathers them; then too each weight gets its own gradient.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "model/blocks/stacked_weights.hpp"
#include "model_io/load_model.hpp"
#include "moe/grouped_gemm.hpp"

namespace m = superoffload::model;
namespace moe = superoffload::plugins::moe;
namespace fs = std::filesystem;

namespace {

struct Case {
  std::string architecture;
  int64_t experts, top_k;
};

std::string config_json(const Case& c) {
  const std::string experts_key = c.architecture == "Qwen3MoeForCausalLM" ? "num_experts" : "num_local_experts";
  return R"({"architectures": [")" + c.architecture + R"("], "vocab_size": 61, "hidden_size": 32,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "intermediate_size": 24, "moe_intermediate_size": 24, ")" + experts_key + R"(": )" + std::to_string(c.experts) +
         R"(, "num_experts_per_tok": )" + std::to_string(c.top_k) +
         R"(, "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "norm_topk_prob": true, "sliding_window": 4})";
}

class MoeGrouped : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("so_moe_grouped_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    unsetenv("SUPEROFFLOAD_MOE_EXPERTS");
    unsetenv("SUPEROFFLOAD_MOE_GROUPED_MM");
  }
  std::shared_ptr<m::CausalLM> build(const Case& c) {
    std::ofstream(dir_ / "config.json") << config_json(c);
    return m::load_model(dir_.string(), "auto", superoffload::config::InitMode::random, 5).model;
  }
  fs::path dir_;
};

// The decoder block's output and the gradients of its input and every parameter.
struct Run {
  at::Tensor output;
  std::vector<at::Tensor> gradients;
};

Run run_block(m::Layer& block, const at::Tensor& x, const at::Tensor& upstream) {
  block.zero_grad();
  const auto input = x.detach().clone().requires_grad_(true);
  const int64_t batch = x.size(0), seq = x.size(1);
  m::BatchContext context;
  context.position_ids = at::arange(seq, at::kLong).unsqueeze(0).expand({batch, seq});
  auto out = block.forward(input, context);
  out.backward(upstream);
  Run r{out.detach(), {input.grad()}};
  for (const auto& p : block.parameters()) r.gradients.push_back(p.grad().defined() ? p.grad() : at::zeros_like(p));
  return r;
}

void expect_close(const Run& a, const Run& b, const std::string& what) {
  EXPECT_TRUE(at::allclose(a.output, b.output, 1e-5, 1e-6)) << what << ": outputs differ by "
                                                          << (a.output - b.output).abs().max().item<double>();
  ASSERT_EQ(a.gradients.size(), b.gradients.size());
  for (size_t i = 0; i < a.gradients.size(); ++i) {
    EXPECT_TRUE(at::allclose(a.gradients[i], b.gradients[i], 1e-5, 1e-6))
        << what << ": gradient " << i << " differs by " << (a.gradients[i] - b.gradients[i]).abs().max().item<double>();
  }
}

// The block's router: "mlp.gate" (Qwen3-MoE), "block_sparse_moe.gate" (Mixtral), "mlp.router" (GPT-OSS).
at::Tensor router_weight(m::Layer& block) {
  for (const auto& item : block.named_parameters(/*recurse=*/true)) {
    const auto& name = item.key();
    if (name.find("gate.weight") != std::string::npos && name.find("experts") == std::string::npos) return item.value();
    if (name.find("router.weight") != std::string::npos) return item.value();
  }
  return {};
}

void compare_paths(m::Layer& block, const std::string& what) {
  at::manual_seed(11);
  // Two sequences; the second's tail stands for padding (its rows route like any other).
  const auto x = at::randn({2, 6, 32});
  const auto upstream = at::randn({2, 6, 32});
  setenv("SUPEROFFLOAD_MOE_EXPERTS", "loop", 1);
  const auto reference = run_block(block, x, upstream);
  unsetenv("SUPEROFFLOAD_MOE_EXPERTS");
  for (const char* kernel : {"library", "loop"}) {
    setenv("SUPEROFFLOAD_MOE_GROUPED_MM", kernel, 1);
    expect_close(run_block(block, x, upstream), reference, what + ", grouped (" + kernel + " kernel)");
  }
}

}  // namespace

TEST_F(MoeGrouped, EqualsTheLoopForEveryFamilyAndRouting) {
  for (const char* architecture : {"Qwen3MoeForCausalLM", "MixtralForCausalLM", "GptOssForCausalLM"}) {
    // 16 experts, top-2, 12 tokens: most experts get nothing.
    for (const Case c : {Case{architecture, 16, 2}, Case{architecture, 4, 4}}) {
      const auto model = build(c);
      auto& block = *model->layers().at(1);
      const std::string what = std::string(architecture) + " " + std::to_string(c.experts) + " experts top-" +
                               std::to_string(c.top_k);
      compare_paths(block, what);
      // A router that cannot tell tokens apart: every token on the same top-k experts.
      {
        torch::NoGradGuard no_grad;
        router_weight(block).zero_();
      }
      compare_paths(block, what + ", every token on the same experts");
    }
  }
}

TEST_F(MoeGrouped, ExpertsInOneBufferAreAViewWithAGradientEach) {
  // Three experts of gate [3, 4], up [3, 4], down [4, 3], laid out as ZeRO-3 gathers them.
  const int64_t experts = 3, out = 3, in = 4;
  const auto flat = at::randn({5 + experts * 3 * out * in});  // 5 elements of another parameter first
  std::vector<at::Tensor> gate_up, down, leaves;
  int64_t offset = 5;
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t p = 0; p < 3; ++p) {
      auto w = flat.narrow(0, offset, out * in).view(p == 2 ? at::IntArrayRef{in, out} : at::IntArrayRef{out, in});
      // A leaf whose data is the view, as PartitionedLayer binds a gathered parameter.
      auto leaf = at::empty({0}).requires_grad_(true);
      leaf.set_data(w);
      leaves.push_back(leaf);
      (p == 2 ? down : gate_up).push_back(leaf);
      offset += out * in;
    }
  }
  const auto stacked = m::stacked_weights(gate_up, 2);
  EXPECT_EQ(stacked.sizes(), (at::IntArrayRef{experts, 2 * out, in}));
  EXPECT_EQ(stacked.const_data_ptr(), flat.narrow(0, 5, 1).const_data_ptr()) << "gate and up are not read in place";
  EXPECT_EQ(stacked.stride(0), 3 * out * in);
  const auto down_stacked = m::stacked_weights(down, 1);
  EXPECT_EQ(down_stacked.const_data_ptr(), flat.narrow(0, 5 + 2 * out * in, 1).const_data_ptr());
  for (int64_t e = 0; e < experts; ++e) {
    EXPECT_TRUE(at::equal(stacked[e].narrow(0, 0, out), gate_up[static_cast<size_t>(2 * e)].detach()));
    EXPECT_TRUE(at::equal(stacked[e].narrow(0, out, out), gate_up[static_cast<size_t>(2 * e + 1)].detach()));
  }
  // Rows of groups 0 and 2 (group 1 empty): each weight gets exactly its own rows' gradient.
  const auto x = at::randn({5, in});
  const auto ends = at::tensor({2, 2, 5}, at::kInt);
  const auto y = moe::grouped_linear(x, stacked, ends);
  const auto upstream = at::randn_like(y);
  y.backward(upstream);
  const int64_t begins[] = {0, 2, 2}, ends_of[] = {2, 2, 5};
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t begin = begins[e], end = ends_of[e];
    const auto rows = x.narrow(0, begin, end - begin);
    const auto up_rows = upstream.narrow(0, begin, end - begin);
    const auto expected = at::mm(up_rows.t(), rows);  // [2·out, in]
    EXPECT_TRUE(at::allclose(gate_up[static_cast<size_t>(2 * e)].grad(), expected.narrow(0, 0, out), 1e-5, 1e-6)) << e;
    EXPECT_TRUE(at::allclose(gate_up[static_cast<size_t>(2 * e + 1)].grad(), expected.narrow(0, out, out), 1e-5, 1e-6))
        << e;
  }
  // The experts' gradients are views of the one stacked gradient the product wrote, not copies
  // (train/memory_plan.cpp counts it once).
  EXPECT_TRUE(gate_up[0].grad().storage().is_alias_of(gate_up[5].grad().storage()));
  // Weights that do not share a buffer are stacked by a copy, with the same results.
  std::vector<at::Tensor> separate;
  for (const auto& w : gate_up) separate.push_back(w.detach().clone().requires_grad_(true));
  const auto copied = m::stacked_weights(separate, 2);
  EXPECT_TRUE(at::equal(copied, stacked.detach()));
  EXPECT_NE(copied.const_data_ptr(), stacked.const_data_ptr());
}
