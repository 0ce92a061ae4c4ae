// The model contract the engine relies on, on the shipped llama plugin with a tiny config:
// HF names, deterministic initialisation independent of order, the parameter counts FLOPs are
// computed from (dense and mixture-of-experts), and a
// chunked loss whose backward equals plain autograd over the whole sequence.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <malloc.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "base/logging.hpp"
#include "model/blocks/attention.hpp"
#include "model/blocks/decoder_layers.hpp"
#include "model/load_balancing.hpp"
#include "model_io/load_model.hpp"
#include "peak_rss.hpp"

namespace m = superoffload::model;

namespace {

class ModelContract : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { superoffload::log::init(superoffload::log::Level::warning); }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("so_contract_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 53,
      "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "initializer_range": 0.05, "tie_word_embeddings": false})";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::shared_ptr<m::CausalLM> build(uint64_t seed) { return m::load_model(dir_.string(), "auto", superoffload::config::InitMode::random, seed).model; }

  std::filesystem::path dir_;
};

TEST_F(ModelContract, LayersCarryHuggingFaceNames) {
  const auto model = build(1);
  ASSERT_EQ(model->layers().size(), 4u);  // embedding, 2 blocks, head
  const auto names = model->hf_parameter_names();
  EXPECT_EQ(names.front(), "model.embed_tokens.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.1.self_attn.k_proj.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.0.post_attention_layernorm.weight"), names.end());
  EXPECT_EQ(names.back(), "lm_head.weight");
  EXPECT_EQ(names.size(), 1u + 2 * 9 + 2);
  EXPECT_FALSE(model->is_moe());
}

TEST_F(ModelContract, InitialisationIsDeterministicPerName) {
  const auto a = build(7), b = build(7), c = build(8);
  for (size_t l = 0; l < a->layers().size(); ++l) {
    const auto pa = a->layers()[l]->hf_parameters(), pb = b->layers()[l]->hf_parameters(),
               pc = c->layers()[l]->hf_parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_TRUE(pa[i].second.equal(pb[i].second)) << pa[i].first;
      if (pa[i].second.dim() == 1) {
        EXPECT_TRUE(pa[i].second.eq(1).all().item<bool>()) << pa[i].first << " (norm scales start at 1)";
      } else {
        EXPECT_FALSE(pa[i].second.equal(pc[i].second)) << pa[i].first << " ignores the seed";
      }
    }
  }
  const auto embedding = a->layers()[0]->hf_parameters()[0].second;
  EXPECT_NEAR(embedding.std().item<double>(), 0.05, 0.005) << "initializer_range";
}

// The shape the FLOP accounting (train/throughput.hpp) multiplies, counted by hand.
TEST_F(ModelContract, ShapeCountsEveryParameterAndTheActiveOnesOfAMixture) {
  const auto s = build(1)->shape();
  // Embedding and head 53·32 each; per block q, o 32·32, k, v 32·16, gate, up, down 32·48, two norms; final norm.
  EXPECT_EQ(s.total_parameters, 53 * 32 * 2 + 2 * (32 * 32 * 2 + 32 * 16 * 2 + 3 * 32 * 48 + 2 * 32) + 32);
  EXPECT_EQ(s.active_parameters, s.total_parameters);
  EXPECT_EQ(s.num_layers, 2);
  EXPECT_EQ(s.hidden_size, 32);

  // Mixtral with 4 experts, 2 per token: a token passes through 2 of the 4 experts' weights.
  std::ofstream(dir_ / "config.json") << R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 53,
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2, "tie_word_embeddings": false})";
  const auto moe = build(1)->shape();
  const int64_t expert = 3 * 32 * 48, router = 4 * 32;
  const int64_t shared = 53 * 32 * 2 + 2 * (32 * 32 * 2 + 32 * 16 * 2 + router + 2 * 32) + 32;
  EXPECT_EQ(moe.total_parameters, shared + 2 * 4 * expert);
  EXPECT_EQ(moe.active_parameters, shared + 2 * 2 * expert);
}

TEST_F(ModelContract, ChunkedLossAndBackwardEqualPlainAutograd) {
  // Fixed data (build seeds the weights): unseeded, about 1 run in 30 drew a batch whose losses
  // differed by 2 fp32 ulps, over the 1e-6 this test had.
  at::manual_seed(7);
  const auto model = build(3);
  const auto& layers = model->layers();
  auto* head = dynamic_cast<m::HeadLayer*>(layers.back().get());
  ASSERT_NE(head, nullptr);
  const auto tokens = at::randint(0, 53, {2, 11}, at::kLong);
  auto labels = tokens.roll(-1, 1).clone();
  labels.select(1, 10).fill_(-100);
  labels[0][3] = -100;
  m::BatchContext context;
  context.position_ids = at::arange(11, at::kLong).unsqueeze(0).expand({2, 11});
  at::Tensor hidden;
  {
    torch::NoGradGuard no_grad;
    hidden = tokens;
    for (size_t i = 0; i + 1 < layers.size(); ++i) hidden = layers[i]->forward(hidden, context);
  }
  // Reference: whole-sequence logits, mean loss, autograd.
  auto input = hidden.clone().requires_grad_(true);
  const auto logits = head->forward(input, context);
  const auto reference = at::cross_entropy_loss(logits.reshape({-1, 53}), labels.reshape({-1}), {},
                                                at::Reduction::Mean, -100);
  reference.backward();
  const auto reference_weight_grad = head->hf_parameters().back().second.grad().clone();
  for (auto& [name, p] : head->hf_parameters()) p.mutable_grad().reset();

  const int64_t counted = labels.ne(-100).sum().item<int64_t>();
  const auto [sum, hidden_grad] = head->loss_and_backward(hidden, labels, /*chunk_tokens=*/4,
                                                          1.0 / static_cast<double>(counted), context);
  EXPECT_EQ(sum.tokens.item<int64_t>(), counted);
  // fp32 logits cut into chunks round differently from whole-sequence ones: a few ulps.
  const double ulps = 4 * std::numeric_limits<float>::epsilon();
  EXPECT_NEAR(sum.sum.item<double>() / counted, reference.item<double>(), ulps * std::abs(reference.item<double>()));
  EXPECT_TRUE(hidden_grad.allclose(input.grad(), 1e-6, 1e-7));
  EXPECT_TRUE(head->hf_parameters().back().second.grad().allclose(reference_weight_grad, 1e-6, 1e-7));
  const auto no_grad_sum = head->loss(hidden, labels, 3, context);
  EXPECT_NEAR(no_grad_sum.sum.item<double>(), sum.sum.item<double>(), ulps * std::abs(sum.sum.item<double>()));
}

// Long context (#50): the chunked loss never holds the whole sequence's logits or their
// gradient. 16,384 tokens over a 32,768-token vocabulary are 2 GiB of fp32 logits and 2 GiB
// more of their gradient; in chunks of 1,024 tokens each chunk's are 128 MiB, freed before the
// next. The peak resident set of this process (each test runs in its own) may grow by less
// than 3/8 of one whole-sequence logits tensor.
TEST_F(ModelContract, LongSequenceLossHoldsOneChunkOfLogitsAtATime) {
  std::ofstream(dir_ / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 32768,
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "initializer_range": 0.05, "tie_word_embeddings": false})";
  at::manual_seed(5);
  const auto model = build(5);
  auto* head = dynamic_cast<m::HeadLayer*>(model->layers().back().get());
  ASSERT_NE(head, nullptr);
  constexpr int64_t kSeq = 16384, kVocab = 32768;
  const auto hidden = at::randn({1, kSeq, 32});
  const auto labels = at::randint(0, kVocab, {1, kSeq}, at::kLong);
  m::BatchContext context;
  context.position_ids = at::arange(kSeq, at::kLong).unsqueeze(0);
  const int64_t before = superoffload::testing::peak_rss_bytes();
  const auto [sum, hidden_grad] = head->loss_and_backward(hidden, labels, /*chunk_tokens=*/1024, 1.0 / kSeq, context);
  const int64_t growth = superoffload::testing::peak_rss_bytes() - before;
  const int64_t whole_logits = kSeq * kVocab * 4;
  EXPECT_GT(before, 0) << "VmHWM unreadable";
  EXPECT_LT(growth, whole_logits * 3 / 8) << "peak RSS grew by " << growth / (1 << 20) << " MiB; one sequence's logits are "
                                           << whole_logits / (1 << 20) << " MiB";
  EXPECT_EQ(sum.tokens.item<int64_t>(), kSeq);
  EXPECT_TRUE(std::isfinite(sum.sum.item<double>()));
  EXPECT_EQ(hidden_grad.sizes(), hidden.sizes());
}

// HF Trainer's decay rule, by name (Trainer.get_decay_parameter_names): biases whatever
// their shape, norm weights of every family; everything else is decayed.
TEST(ParameterRole, ByNameAsHfTrainerDecides) {
  using R = m::ParameterRole;
  for (const char* name : {"model.layers.0.self_attn.q_proj.bias", "model.layers.0.mlp.experts.gate_up_proj_bias",
                           "model.layers.0.mlp.experts.down_proj_bias", "model.layers.0.mlp.router.bias",
                           "transformer.h.0.attn.c_attn.bias", "transformer.ln_f.bias"}) {
    EXPECT_EQ(m::parameter_role_by_name(name), R::bias) << name;
  }
  for (const char* name : {"model.norm.weight", "model.layers.3.input_layernorm.weight",
                           "model.layers.3.post_attention_layernorm.weight", "model.layers.0.self_attn.q_norm.weight",
                           "model.layers.0.self_attn.k_norm.weight", "norm.weight", "model.layers.0.pre_RMSNorm.weight"}) {
    EXPECT_EQ(m::parameter_role_by_name(name), R::norm) << name;
  }
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight", "model.layers.0.self_attn.sinks",
                           "model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.gate.weight",
                           "model.layers.0.normal_proj.weight", "model.layers.0.self_attn.o_proj.weight"}) {
    EXPECT_EQ(m::parameter_role_by_name(name), R::weight) << name;
  }
}

// HF's load-balancing loss pools the layers before the product: with two layers it is not the
// mean of the per-layer losses, and the gradient each layer gets equals autograd's of the pooled
// formula written out.
TEST(LoadBalancing, PoolsTheLayersAsHfDoes) {
  const int64_t experts = 4, top_k = 2;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  std::vector<at::Tensor> logits;
  std::vector<m::RouterStatistics> stats;
  for (int layer = 0; layer < 2; ++layer) {
    logits.push_back((at::randn({10, experts}, generator) * (layer + 1)).requires_grad_(true));
    stats.push_back(m::router_statistics(logits.back(), top_k, 0.02));
  }
  const auto pooled = m::load_balancing(stats);

  // HF's load_balancing_loss_func, written out on copies: concatenate, softmax, count top-k, means.
  std::vector<at::Tensor> copies;
  for (const auto& l : logits) copies.push_back(l.detach().clone().requires_grad_(true));
  const auto all = at::cat(copies, 0);
  const auto probs = at::softmax(all, -1);
  const auto chosen = std::get<1>(probs.topk(top_k, -1));
  const auto tokens_per_expert = at::one_hot(chosen, experts).to(at::kFloat).sum(at::IntArrayRef{0, 1}) / all.size(0);
  const auto reference = (tokens_per_expert * probs.mean(0)).sum() * static_cast<double>(experts);
  EXPECT_NEAR(pooled.loss, reference.item<double>(), 1e-6);
  EXPECT_EQ(pooled.coefficient, 0.02);
  double per_layer_mean = 0;
  for (const auto& s : stats) per_layer_mean += m::load_balancing({s}).loss / 2;
  EXPECT_GT(std::abs(per_layer_mean - pooled.loss), 1e-3) << "the test needs layers whose pooled and mean differ";

  // The engine's way: each layer's probability gets the same gradient vector.
  (reference * 0.02).backward();
  for (const auto& s : stats) s.probability.backward(pooled.gradient);
  for (size_t layer = 0; layer < 2; ++layer) {
    EXPECT_TRUE(logits[layer].grad().allclose(copies[layer].grad(), 1e-5, 1e-9)) << "layer " << layer;
    EXPECT_GT(logits[layer].grad().abs().max().item<float>(), 1e-4);
  }
}

// HF's nn.Embedding(padding_idx): the pad row starts at zero and the lookup gives it no gradient.
TEST(TokenEmbedding, PadRowIsZeroAndGetsNoGradient) {
  m::TokenEmbeddingLayer embedding(11, 4, /*padding_idx=*/3);
  {
    torch::NoGradGuard no_grad;
    embedding.embed_tokens->weight.normal_();
  }
  const auto ids = at::tensor({1, 3, 3, 7}, at::kLong).unsqueeze(0);
  embedding.forward(ids, {}).sum().backward();
  const auto grad = embedding.embed_tokens->weight.grad();
  EXPECT_EQ(grad[3].abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(grad[1].sum().item<float>(), 4.0f);
}

TEST_F(ModelContract, RandomInitialisationZeroesThePadRow) {
  std::ofstream(dir_ / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 53,
      "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
      "pad_token_id": 7})";
  const auto model = build(3);
  const auto& table = model->layers().front()->hf_parameters().front().second;
  EXPECT_EQ(table[7].abs().sum().item<float>(), 0.0f);
  EXPECT_GT(table[6].abs().sum().item<float>(), 0.0f);
  EXPECT_FALSE(model->decays("model.layers.0.input_layernorm.weight"));
  EXPECT_TRUE(model->decays("model.embed_tokens.weight"));
}

}  // namespace

namespace {

// Attention written out: scores, a mask from the rule itself (same document, not later, within
// the window), softmax, weighted values; kv heads repeated for their query heads.
at::Tensor explicit_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window,
                              const at::Tensor& documents) {
  const int64_t batch = q.size(0), heads = q.size(1), seq = q.size(2), dim = q.size(3);
  const auto key = k.repeat_interleave(heads / k.size(1), 1), value = v.repeat_interleave(heads / v.size(1), 1);
  auto scores = at::matmul(q, key.transpose(2, 3)) / std::sqrt(static_cast<double>(dim));
  const auto i = at::arange(seq).unsqueeze(1), j = at::arange(seq).unsqueeze(0);
  auto allowed = (j <= i).logical_and(window == 0 ? at::ones_like(i - j, at::kBool) : i - j < window).expand({batch, seq, seq});
  if (documents.defined()) allowed = allowed.logical_and(documents.unsqueeze(2) == documents.unsqueeze(1));
  allowed = allowed.unsqueeze(1);
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), value).transpose(1, 2).reshape({batch, seq, heads * dim});
}

}  // namespace

// Packed documents attend only within themselves, through either kernel causal_attention picks on
// the CPU: a block-causal mask for short documents, one fused call per document for long ones
// (256 tokens or more on average); gradients flow to every input.
TEST(PackedAttention, EqualsTheRuleWrittenOut) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(3);
  const int64_t batch = 2, heads = 4, kv_heads = 2, dim = 8;
  struct Case {
    const char* name;
    int64_t first, second;  // row 0: documents of `first`, 1 and `second` tokens; row 1: one document
  };
  for (const Case c : {Case{"short documents (mask)", 7, 15}, Case{"long documents (per document)", 400, 500}}) {
    const int64_t seq = c.first + 1 + c.second;
    auto q = at::randn({batch, heads, seq, dim}, generator).requires_grad_();
    auto k = at::randn({batch, kv_heads, seq, dim}, generator).requires_grad_();
    auto v = at::randn({batch, kv_heads, seq, dim}, generator).requires_grad_();
    auto documents = at::zeros({batch, seq}, at::kLong);
    documents[0].narrow(0, c.first, 1).fill_(1);
    documents[0].narrow(0, c.first + 1, c.second).fill_(2);
    for (const int64_t window : {int64_t{0}, c.first / 2 + 1}) {
      for (const bool packed : {true, false}) {
        const auto ids = packed ? documents : at::Tensor();
        const auto ours = m::causal_attention(q, k, v, window, ids);
        const auto reference = explicit_attention(q, k, v, window, ids);
        const auto what = std::string(c.name) + ", window " + std::to_string(window) + (packed ? ", packed" : "");
        EXPECT_LT((ours - reference).abs().max().item<double>(), 1e-5) << what;
        const auto weights = at::randn(ours.sizes(), generator);
        const auto ours_grads = torch::autograd::grad({(ours * weights).sum()}, {q, k, v});
        const auto reference_grads = torch::autograd::grad({(reference * weights).sum()}, {q, k, v});
        for (size_t i = 0; i < 3; ++i) {
          EXPECT_LT((ours_grads[i] - reference_grads[i]).abs().max().item<double>(), 1e-5) << "gradient " << i << ", " << what;
        }
      }
    }
    // The documents matter: without them row 0 attends across its boundaries.
    EXPECT_GT((m::causal_attention(q, k, v, 0, documents) - m::causal_attention(q, k, v, 0)).abs().max().item<double>(),
              1e-2) << c.name;
  }
}

// Long rows (over 4,096 tokens) build no [seq, seq] tensor: a sliding window runs in blocks of
// queries, packed documents one call each whatever their length. Both equal the rule written
// out, in outputs and gradients.
TEST(LongRowAttention, EqualsTheRuleWrittenOut) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(4);
  const int64_t heads = 2, kv_heads = 1, dim = 8, seq = 4600;
  auto q = at::randn({1, heads, seq, dim}, generator).requires_grad_();
  auto k = at::randn({1, kv_heads, seq, dim}, generator).requires_grad_();
  auto v = at::randn({1, kv_heads, seq, dim}, generator).requires_grad_();
  // Documents of 1 to 99 tokens (short: below 4,096 tokens a row these would share one mask).
  auto documents = at::zeros({1, seq}, at::kLong);
  for (int64_t at_token = 0, id = 0; at_token < seq; ++id) {
    const int64_t length = std::min(seq - at_token, 1 + (id * 37) % 99);
    documents[0].narrow(0, at_token, length).fill_(id);
    at_token += length;
  }
  struct Case {
    const char* name;
    int64_t window;
    bool packed;
  };
  for (const Case c : {Case{"window 700, blocks of queries", 700, false}, Case{"window 1500", 1500, false},
                       Case{"short documents", 0, true}, Case{"short documents, window 30", 30, true}}) {
    const auto ids = c.packed ? documents : at::Tensor();
    const auto ours = m::causal_attention(q, k, v, c.window, ids);
    const auto reference = explicit_attention(q, k, v, c.window, ids);
    EXPECT_LT((ours - reference).abs().max().item<double>(), 1e-5) << c.name;
    const auto weights = at::randn(ours.sizes(), generator);
    const auto ours_grads = torch::autograd::grad({(ours * weights).sum()}, {q, k, v});
    const auto reference_grads = torch::autograd::grad({(reference * weights).sum()}, {q, k, v});
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_LT((ours_grads[i] - reference_grads[i]).abs().max().item<double>(), 1e-4) << "gradient " << i << ", " << c.name;
    }
  }
}

// ... and at 16,384 tokens the peak resident set of forward and backward grows by far less than
// one [seq, seq] boolean mask (256 MiB; fp32 scores of one head would be 1 GiB): causal, a
// sliding window, short packed documents; and with sinks (GPT-OSS) by far less than the scores.
TEST(LongRowAttention, NoSeqBySeqTensorAt16kTokens) {
  // Blocks of 1 MiB and more straight from mmap and back to the system when freed: glibc would
  // otherwise raise its threshold to 32 MiB as such blocks are freed and keep the smaller blocks
  // of later calls in its heap, where the resident set counts memory no tensor holds.
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 1 << 20), 1);
  const int64_t seq = 16384;
  auto q = at::randn({1, 2, seq, 16}).requires_grad_();
  auto k = at::randn({1, 1, seq, 16}).requires_grad_();
  auto v = at::randn({1, 1, seq, 16}).requires_grad_();
  auto documents = at::arange(seq, at::kLong).div(100, "floor").unsqueeze(0);  // documents of 100 tokens
  const auto weights = at::randn({1, seq, 32});
  const int64_t mask_bytes = seq * seq;
  for (const auto& [name, window, packed] : {std::tuple{"causal", int64_t{0}, false},
                                             std::tuple{"window 512", int64_t{512}, false},
                                             std::tuple{"documents of 100 tokens", int64_t{0}, true}}) {
    const int64_t before = superoffload::testing::peak_rss_bytes();
    const auto out = m::causal_attention(q, k, v, window, packed ? documents : at::Tensor());
    const auto grads = torch::autograd::grad({(out * weights).sum()}, {q, k, v});
    const int64_t growth = superoffload::testing::peak_rss_bytes() - before;
    std::printf("%s at %lld tokens: peak RSS grew by %lld MiB\n", name, static_cast<long long>(seq),
                static_cast<long long>(growth >> 20));
    EXPECT_LT(growth, mask_bytes / 4) << name << ": peak RSS grew by " << (growth >> 20) << " MiB";
  }
  // With sinks: blocks of 256 queries, each block's scores 32 MiB here, made again in backward;
  // the whole row's would be 2 GiB (two heads). Asked: under an eighth of that.
  const auto sinks = at::zeros({2}).requires_grad_();
  const int64_t before = superoffload::testing::peak_rss_bytes();
  const auto out = m::causal_attention_with_sinks(q, k, v, 0, sinks);
  const auto grads = torch::autograd::grad({(out * weights).sum()}, {q, k, v, sinks});
  const int64_t growth = superoffload::testing::peak_rss_bytes() - before, whole_scores = 2 * seq * seq * 4;
  std::printf("sinks at %lld tokens: peak RSS grew by %lld MiB\n", static_cast<long long>(seq),
              static_cast<long long>(growth >> 20));
  EXPECT_LT(growth, whole_scores / 8) << "sinks: peak RSS grew by " << (growth >> 20) << " MiB";
}

// GPT-OSS's attention with sinks on a long row: blocks of queries recomputed in backward
// (model/blocks/token_tiles.hpp), equal to the whole-row computation — which short rows still
// use — in outputs and in the gradients of q, k, v and the sinks, causal and with a window and
// documents; and at 16,384 tokens no [seq, seq] tensor (one head's fp32 scores: 1 GiB).
TEST(LongRowAttention, SinksInBlocksOfQueriesEqualTheWholeRow) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  const int64_t heads = 2, kv_heads = 1, dim = 8, seq = 4500;
  auto q = at::randn({1, heads, seq, dim}, generator).requires_grad_();
  auto k = at::randn({1, kv_heads, seq, dim}, generator).requires_grad_();
  auto v = at::randn({1, kv_heads, seq, dim}, generator).requires_grad_();
  auto sinks = at::randn({heads}, generator).requires_grad_();
  const auto documents = at::arange(seq, at::kLong).div(700, "floor").unsqueeze(0);
  for (const auto& [window, packed] : {std::pair{int64_t{0}, false}, std::pair{int64_t{300}, true}}) {
    const auto ids = packed ? documents : at::Tensor();
    const auto ours = m::causal_attention_with_sinks(q, k, v, window, sinks, ids);
    // The reference, written out for the whole row.
    const auto key = k.repeat_interleave(heads, 1), value = v.repeat_interleave(heads, 1);
    auto scores = at::matmul(q, key.transpose(2, 3)) / std::sqrt(static_cast<double>(dim));
    const auto i = at::arange(seq).unsqueeze(1), j = at::arange(seq).unsqueeze(0);
    auto allowed = (j <= i).logical_and(window == 0 ? at::ones_like(i - j, at::kBool) : i - j < window);
    if (packed) allowed = allowed.logical_and(documents[0].unsqueeze(1) == documents[0].unsqueeze(0));
    scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
    const auto with_sink = at::cat({scores, sinks.reshape({1, heads, 1, 1}).expand({1, heads, seq, 1})}, -1);
    const auto reference = at::matmul(at::softmax(with_sink, -1).narrow(-1, 0, seq), value)
                               .transpose(1, 2)
                               .reshape({1, seq, heads * dim});
    const std::string what = "window " + std::to_string(window) + (packed ? ", documents" : "");
    EXPECT_LT((ours - reference).abs().max().item<double>(), 1e-5) << what;
    const auto weights = at::randn(ours.sizes(), generator);
    const auto ours_grads = torch::autograd::grad({(ours * weights).sum()}, {q, k, v, sinks});
    const auto reference_grads = torch::autograd::grad({(reference * weights).sum()}, {q, k, v, sinks});
    for (size_t g = 0; g < 4; ++g) {
      const double scale = std::max(1.0, reference_grads[g].abs().max().item<double>());
      EXPECT_LT((ours_grads[g] - reference_grads[g]).abs().max().item<double>(), 1e-4 * scale) << "gradient " << g << ", " << what;
    }
  }
}

