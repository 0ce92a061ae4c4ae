// MLPs over tiles of tokens ([model] tile_tokens, model/blocks/token_tiles.hpp, #50): the tiled
// computation equals the untiled one to fp32 round-off in its output and in the gradients of its
// inputs and parameters — for a plain function with an integer input beside, and for the
// decoder block of every family (Llama, GPT-2, Qwen3-MoE with its load-balancing statistics,
// Mixtral, GPT-OSS), tiles not dividing the tokens; and with tiles, one block's forward and
// backward at 8,192 tokens never holds its tokens × intermediate tensors whole (peak RSS).
#include <gtest/gtest.h>

#include <malloc.h>

#include <string>

#include "model/blocks/token_tiles.hpp"
#include "config_models.hpp"
#include "model_io/load_model.hpp"
#include "peak_rss.hpp"

namespace m = superoffload::model;

namespace {

void expect_close(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  EXPECT_TRUE(at::allclose(a, b, 1e-5, 1e-6)) << what << " differs by " << (a - b).abs().max().item<double>();
}

TEST(TokenTiles, EqualUntiledInOutputAndEveryGradient) {
  at::manual_seed(3);
  auto w1 = (at::randn({40, 8}) * 0.3).requires_grad_(true);
  auto w2 = (at::randn({8, 40}) * 0.3).requires_grad_(true);
  const auto x = at::randn({23, 8});
  const auto scale = at::rand({23, 2});
  const auto pick = at::randint(0, 2, {23, 1}, at::kLong);  // an integer input: no gradient
  const auto upstream = at::randn({23, 8});
  auto run = [&](int64_t tile) {
    w1.mutable_grad().reset();
    w2.mutable_grad().reset();
    auto xi = x.clone().requires_grad_(true), si = scale.clone().requires_grad_(true);
    const auto y = m::over_token_tiles({xi, si, pick}, tile, [&](const std::vector<at::Tensor>& t) {
      const auto hidden = at::gelu(at::linear(t[0], w1));
      return at::linear(hidden, w2) * t[1].gather(1, t[2]);
    });
    y.backward(upstream);
    return std::vector<at::Tensor>{y.detach(), xi.grad(), si.grad(), w1.grad().clone(), w2.grad().clone()};
  };
  const auto whole = run(0);
  for (int64_t tile : {1, 5, 22, 23, 100}) {
    const auto tiled = run(tile);
    const char* names[] = {"output", "input gradient", "scale gradient", "w1 gradient", "w2 gradient"};
    for (size_t i = 0; i < whole.size(); ++i) expect_close(tiled[i], whole[i], std::string(names[i]) + ", tile " + std::to_string(tile));
  }
  // Without gradients: tiles one after another, same values.
  torch::NoGradGuard no_grad;
  const auto plain = m::over_token_tiles({x}, 4, [&](const std::vector<at::Tensor>& t) { return at::linear(t[0], w1); });
  EXPECT_TRUE(at::allclose(plain, at::linear(x, w1), 1e-6, 1e-7));
}

using TiledBlocks = superoffload::testing::ConfigModels;

struct BlockRun {
  std::vector<at::Tensor> values;  // output, input gradient, parameter gradients
  double aux = 0;                  // the router statistics' sum (MoE with output_router_logits)
};

BlockRun run_block(m::Layer& block, const at::Tensor& x, const at::Tensor& upstream, int64_t tile) {
  block.zero_grad();
  const auto input = x.clone().requires_grad_(true);
  std::vector<m::RouterStatistics> routers;
  m::BatchContext context;
  context.position_ids = at::arange(x.size(1), at::kLong).unsqueeze(0).expand({x.size(0), x.size(1)});
  context.router_statistics = &routers;
  context.tile_tokens = tile;
  const auto out = block.forward(input, context);
  out.backward(upstream);
  BlockRun r{{out.detach(), input.grad()}};
  for (const auto& p : block.parameters()) r.values.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
  for (const auto& s : routers) r.aux += s.probability.sum().item<double>();
  return r;
}

TEST_F(TiledBlocks, EveryFamilysBlockEqualsItsUntiledSelf) {
  const std::string attention = R"("num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8, "max_position_embeddings": 64, "vocab_size": 61)";
  const std::pair<const char*, std::string> families[] = {
      {"llama", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 48, )" + attention + "}"},
      {"gpt2", R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 61, "n_embd": 32, "n_layer": 1, "n_head": 4,
         "n_positions": 64})"},
      {"qwen3_moe", R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 32, "intermediate_size": 48,
         "moe_intermediate_size": 24, "num_experts": 6, "num_experts_per_tok": 2, "norm_topk_prob": true,
         "output_router_logits": true, "router_aux_loss_coef": 0.01, )" + attention + "}"},
      {"mixtral", R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 32, "intermediate_size": 24,
         "num_local_experts": 4, "num_experts_per_tok": 2, )" + attention + "}"},
      {"gpt_oss", R"({"architectures": ["GptOssForCausalLM"], "hidden_size": 32, "intermediate_size": 24,
         "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 4, )" + attention + "}"},
  };
  for (const auto& [family, config] : families) {
    const auto model = build(config);
    auto& block = *model->layers().at(1);
    at::manual_seed(11);
    const auto x = at::randn({2, 12, 32});
    const auto upstream = at::randn({2, 12, 32});
    const auto whole = run_block(block, x, upstream, 0);
    for (int64_t tile : {5, 16}) {
      const auto tiled = run_block(block, x, upstream, tile);
      ASSERT_EQ(tiled.values.size(), whole.values.size());
      for (size_t i = 0; i < whole.values.size(); ++i) {
        expect_close(tiled.values[i], whole.values[i],
                     std::string(family) + ", tile " + std::to_string(tile) + ", value " + std::to_string(i));
      }
      EXPECT_NEAR(tiled.aux, whole.aux, 1e-5 * std::max(1.0, std::abs(whole.aux))) << family << ": router statistics";
    }
  }
}

// 8,192 tokens (64 rows of 128: attention stays small) through a Llama block whose MLP is
// 16,384 wide: each tokens × intermediate tensor is 512 MiB. Measured here (Sapphire Rapids):
// untiled, the peak RSS grows by 3,121 MiB (six of them); in tiles of 128, 512, 1,024 and 2,048
// tokens by 97, 250, 444 and 830 MiB (about 7.5 tiles' worth: a tile's recompute and its
// gradients). In tiles of 256 it may grow by less than half of one whole intermediate. The
// untiled run is not made here, to keep the suite's memory small.
TEST_F(TiledBlocks, ALongMicroBatchNeverHoldsTheWholeIntermediate) {
  const auto model = build(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 16384,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 61})");
  auto& block = *model->layers().at(1);
  // Blocks of 1 MiB and more straight from mmap and back to the system when freed: glibc would
  // otherwise raise its threshold to 32 MiB as such blocks are freed, and keep smaller tiles'
  // freed blocks in its heap, where the resident set counts memory no tensor holds.
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 1 << 20), 1);
  at::manual_seed(1);
  const auto x = at::randn({64, 128, 64});
  const auto upstream = at::randn({64, 128, 64});
  constexpr int64_t tile = 256;
  const int64_t before = superoffload::testing::peak_rss_bytes();
  const auto r = run_block(block, x, upstream, tile);
  const int64_t growth = superoffload::testing::peak_rss_bytes() - before;
  const int64_t whole_intermediate = int64_t{8192} * 16384 * 4;
  EXPECT_GT(before, 0) << "VmHWM unreadable";
  EXPECT_LT(growth, whole_intermediate / 2) << "peak RSS grew by " << growth / (1 << 20) << " MiB with tiles of " << tile
                                            << " tokens; one whole intermediate is " << whole_intermediate / (1 << 20) << " MiB";
  EXPECT_TRUE(r.values[1].isfinite().all().item<bool>());
  std::printf("tiles of %lld tokens: peak RSS grew by %lld MiB (one whole intermediate: %lld MiB)\n",
              static_cast<long long>(tile), static_cast<long long>(growth >> 20),
              static_cast<long long>(whole_intermediate >> 20));
}

}  // namespace
