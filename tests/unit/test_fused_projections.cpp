// One matrix product for q/k/v and one for gate/up where ZeRO-3's gathered buffer holds the
// weights back to back (model/blocks/stacked_weights.hpp, swiglu.hpp): the stacked operand is a
// view of the buffer and every weight gets exactly its gradient; anything not back to back is
// refused (the caller multiplies weight by weight); swiglu equals silu(gate) · up bit for bit in
// value and gradients; and each family's decoder block bound to one buffer, as the engine binds
// it, runs fewer products with the same output and gradients as with separate weights — on a
// request (SUPEROFFLOAD_FUSED_PROJECTIONS = "always"; by default nowhere: it measured slower on an
// H100, and a CPU keeps the separate products the parity tests hold bitwise to their references).
#include <ATen/record_function.h>
#include <gtest/gtest.h>

#include <stdlib.h>

#include <string>

#include "model/blocks/stacked_weights.hpp"
#include "model/blocks/swiglu.hpp"
#include "config_models.hpp"
#include "model_io/load_model.hpp"

namespace m = superoffload::model;

namespace {

// A leaf whose data is a view of `flat`, as PartitionedLayer binds a gathered parameter.
at::Tensor bound_leaf(const at::Tensor& flat, int64_t offset, at::IntArrayRef shape) {
  auto leaf = at::empty({0}).requires_grad_(true);
  int64_t numel = 1;
  for (const auto d : shape) numel *= d;
  leaf.set_data(flat.narrow(0, offset, numel).view(shape));
  return leaf;
}

TEST(StackedInPlace, AdjacentWeightsAreOneOperandWithAGradientEach) {
  at::manual_seed(1);
  const int64_t in = 6;
  const auto flat = at::randn({7 + (4 + 2 + 2) * in});  // 7 elements of another parameter first
  const auto q = bound_leaf(flat, 7, {4, in}), k = bound_leaf(flat, 7 + 4 * in, {2, in}),
             v = bound_leaf(flat, 7 + 6 * in, {2, in});
  const auto stacked = m::stacked_in_place({q, k, v});
  ASSERT_TRUE(stacked.defined());
  EXPECT_EQ(stacked.sizes(), (at::IntArrayRef{8, in}));
  EXPECT_EQ(stacked.const_data_ptr(), q.const_data_ptr()) << "not read in place";
  EXPECT_TRUE(at::equal(stacked, at::cat({q, k, v}).detach()));
  const auto x = at::randn({5, in});
  const auto y = at::linear(x, stacked);
  const auto upstream = at::randn_like(y);
  y.backward(upstream);
  const auto expected = at::mm(upstream.t(), x);
  EXPECT_TRUE(at::allclose(q.grad(), expected.narrow(0, 0, 4), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(k.grad(), expected.narrow(0, 4, 2), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(v.grad(), expected.narrow(0, 6, 2), 1e-5, 1e-6));

  // Not back to back: a gap, separate storage, another width, another order, a transposed view.
  const auto gap = bound_leaf(flat, 7 + 6 * in + 1, {2, in - 1});
  EXPECT_FALSE(m::stacked_in_place({q, k, gap}).defined()) << "a gap";
  EXPECT_FALSE(m::stacked_in_place({q, k, v.detach().clone()}).defined()) << "separate storage";
  const auto narrow = bound_leaf(flat, 7 + 4 * in, {3, in - 2});
  EXPECT_FALSE(m::stacked_in_place({q, narrow}).defined()) << "another width";
  EXPECT_FALSE(m::stacked_in_place({k, q}).defined()) << "another order";
  const auto square = bound_leaf(flat, 7, {in, in});
  EXPECT_FALSE(m::stacked_in_place({square.t(), bound_leaf(flat, 7 + in * in, {1, in})}).defined()) << "transposed";
  EXPECT_FALSE(m::stacked_in_place({}).defined());
}

TEST(Swiglu, IsTheChainBitForBitInValueAndGradients) {
  at::manual_seed(2);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const auto values = (at::randn({3, 5, 2 * 7}) * 3).to(dtype);
    const auto upstream = at::randn({3, 5, 7}).to(dtype);
    auto a = values.clone().requires_grad_(true), b = values.clone().requires_grad_(true);
    const auto fused = m::swiglu(a);
    const auto chain = at::silu(b.narrow(-1, 0, 7)) * b.narrow(-1, 7, 7);
    EXPECT_TRUE(at::equal(fused, chain)) << c10::toString(dtype);
    fused.backward(upstream);
    chain.backward(upstream);
    EXPECT_TRUE(at::equal(a.grad(), b.grad())) << c10::toString(dtype);
  }
  EXPECT_THROW(m::swiglu(at::zeros({2, 3})), c10::Error);
}

// Counts the matrix products LibTorch runs while alive (this thread).
class ProductCount {
 public:
  ProductCount() {
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              const std::string name = fn.name();
              if (name == "aten::mm" || name == "aten::addmm" || name == "aten::bmm") ++count_;
              return nullptr;
            })
            .scopes({at::RecordScope::FUNCTION}));
    count_ = 0;
  }
  ~ProductCount() { at::removeCallback(handle_); }
  int count() const { return count_; }

 private:
  at::CallbackHandle handle_;
  static inline thread_local int count_ = 0;
};

using FusedBlocks = superoffload::testing::ConfigModels;

struct BlockRun {
  std::vector<at::Tensor> values;  // output, input gradient, parameter gradients
  int products = 0;                // matrix products in forward and backward
};

BlockRun run_block(m::Layer& block, const at::Tensor& x, const at::Tensor& upstream) {
  block.zero_grad();
  const auto input = x.clone().requires_grad_(true);
  std::vector<m::RouterStatistics> routers;
  m::BatchContext context;
  context.position_ids = at::arange(x.size(1), at::kLong).unsqueeze(0).expand({x.size(0), x.size(1)});
  context.router_statistics = &routers;
  BlockRun r;
  {
    const ProductCount products;
    const auto out = block.forward(input, context);
    out.backward(upstream);
    r.products = products.count();
    r.values = {out.detach(), input.grad()};
  }
  for (const auto& [name, p] : block.hf_parameters()) {
    r.values.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
  }
  return r;
}

// The block's parameters moved into one flat buffer in their HF order, as the engine's gathered
// layer holds them (zero/partitioned_layer.cpp binds views of it).
void bind_to_one_buffer(m::Layer& block) {
  int64_t total = 0;
  for (const auto& [name, p] : block.hf_parameters()) total += p.numel();
  const auto flat = at::empty({total});
  int64_t offset = 0;
  for (auto [name, p] : block.hf_parameters()) {
    auto view = flat.narrow(0, offset, p.numel()).view(p.sizes());
    view.copy_(p.detach());
    p.set_data(view);
    offset += p.numel();
  }
}

TEST_F(FusedBlocks, EveryFamilysBlockInOneBufferEqualsItsSeparateSelfWithFewerProducts) {
  const std::string attention = R"("num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8, "max_position_embeddings": 64, "vocab_size": 61)";
  // Products saved per block: q/k/v 3 → 1 in forward, 6 → 2 in backward; gate/up 2 → 1 and
  // 4 → 2 (dense MLPs only); Qwen2's biased q/k/v stay separate. Phi3 is fused by its weights.
  const std::tuple<const char*, std::string, int> families[] = {
      {"llama", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 48, )" + attention + "}",
       6 + 3},
      {"qwen3", R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 32, "intermediate_size": 48, )" + attention + "}",
       6 + 3},
      {"qwen2 (q/k/v biases)", R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 32, "intermediate_size": 48, )" +
       attention + "}", 3},
      {"phi3", R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 32, "intermediate_size": 48, )" + attention + "}", 0},
      {"qwen3_moe", R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 32, "intermediate_size": 48,
         "moe_intermediate_size": 24, "num_experts": 6, "num_experts_per_tok": 2, "norm_topk_prob": true,
         "output_router_logits": true, "router_aux_loss_coef": 0.01, )" + attention + "}", 6},
      {"mixtral", R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 32, "intermediate_size": 24,
         "num_local_experts": 4, "num_experts_per_tok": 2, )" + attention + "}", 6},
  };
  for (const auto& [family, config, saved] : families) {
    const auto model = build(config);
    auto& block = *model->layers().at(1);
    at::manual_seed(11);
    const auto x = at::randn({2, 12, 32});
    const auto upstream = at::randn({2, 12, 32});
    const auto separate = run_block(block, x, upstream);
    bind_to_one_buffer(block);
    ::unsetenv("SUPEROFFLOAD_FUSED_PROJECTIONS");
    EXPECT_FALSE(m::fuses_projections(at::kCPU));
    EXPECT_FALSE(m::fuses_projections(at::Device(at::kCUDA, 0)));
    const auto cpu_default = run_block(block, x, upstream);
    EXPECT_EQ(cpu_default.products, separate.products) << family << ": a CPU fused by default";
    for (size_t i = 0; i < separate.values.size(); ++i) {
      EXPECT_TRUE(at::equal(cpu_default.values[i], separate.values[i])) << family << ", value " << i << " is not bitwise";
    }
    ::setenv("SUPEROFFLOAD_FUSED_PROJECTIONS", "always", 1);
    const auto fused = run_block(block, x, upstream);
    ::unsetenv("SUPEROFFLOAD_FUSED_PROJECTIONS");
    EXPECT_EQ(separate.products - fused.products, saved) << family << ": " << separate.products << " products, then "
                                                          << fused.products;
    ASSERT_EQ(fused.values.size(), separate.values.size());
    for (size_t i = 0; i < separate.values.size(); ++i) {
      const auto &a = fused.values[i], &b = separate.values[i];
      EXPECT_TRUE(at::allclose(a, b, 1e-5, 1e-6))
          << family << ", value " << i << " differs by " << (a - b).abs().max().item<double>();
    }
  }
}

}  // namespace
