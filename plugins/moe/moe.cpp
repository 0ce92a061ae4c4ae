// The moe plugin: mixture-of-experts decoders — Qwen3MoeForCausalLM and MixtralForCausalLM
// (softmax top-k routing, norm_topk_prob) and GptOssForCausalLM (router with bias, top-k
// softmax, clamped SwiGLU experts with biases, attention sinks, alternating sliding-window
// and full attention, YaRN RoPE). Each expert runs only on the tokens routed to it.
//
// Experts: the (token, slot) pairs are sorted by expert once per layer on the device, and each
// projection of all experts is one grouped matrix product over them (moe/grouped_gemm.hpp)
// whose group ends stay on the device: no host value inside a layer, in forward, recompute or
// backward. The outputs go back to (token, slot) order and are summed per token with the
// routing weights. SUPEROFFLOAD_MOE_EXPERTS=loop runs the per-expert loop instead (a module
// call per expert on its tokens, the group sizes read on the host): the reference the tests
// and bench/bench_moe_layer compare with.
//
// Expert parallelism ([moe] expert_parallel_size, model/expert_parallel.hpp): each rank holds
// and computes only its range of the experts (the engine binds only those parameters). The
// sorted pairs go to their experts' ranks (model::dispatch_to_experts), which run the same
// grouped products on what they received, and come back to be summed per token here.
//
// Load-balancing loss: when config.json sets output_router_logits (as HF requires for it to
// count), each MoE layer hands its router's statistics to the engine, which pools all MoE
// layers of the forward pass into HF's loss (model/load_balancing.hpp), weighted by
// router_aux_loss_coef. The statistics come from the raw router logits in every family (GPT-OSS:
// with the router's bias), as HF records them, not from the normalised top-k weights.
#include <cstdlib>
#include <cstring>

#include "base/error.hpp"
#include "model/blocks/decoder_layers.hpp"
#include "model/blocks/expert_exchange.hpp"
#include "model/blocks/linear.hpp"
#include "model/blocks/rms_norm.hpp"
#include "model/blocks/rotary.hpp"
#include "model/blocks/self_attention.hpp"
#include "model/blocks/swiglu.hpp"
#include "model/blocks/token_tiles.hpp"
#include "model/load_balancing.hpp"
#include "model/plugin.hpp"
#include "experts.hpp"

namespace superoffload::plugins::moe {
namespace {

using model::BatchContext;
using model::HfConfig;
using model::Linear;

enum class Family { qwen3_moe, mixtral, gpt_oss };

struct Settings {
  Family family = Family::qwen3_moe;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t experts = 0, top_k = 0, expert_intermediate = 0, dense_intermediate = 0;
  double eps = 1e-6, initializer_range = 0.02;
  int64_t padding_idx = -1;  // embedding row without gradient (pad_token_id), -1: none
  bool tie_embeddings = false, attention_bias = false, norm_topk_prob = true;
  double aux_loss_coef = 0.0;  // 0 unless output_router_logits
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;
  std::vector<int64_t> sliding_window;  // per layer, 0 = full
  std::vector<bool> sparse;             // per layer: MoE or dense MLP (Qwen3-MoE mlp_only_layers)
};

Settings read_settings(const HfConfig& c) {
  Settings s;
  const auto arch = c.architecture();
  s.family = arch == "MixtralForCausalLM" ? Family::mixtral
             : arch == "GptOssForCausalLM" ? Family::gpt_oss
                                           : Family::qwen3_moe;
  s.vocab = c.dimension("vocab_size");
  s.hidden = c.dimension("hidden_size");
  s.layers = c.dimension("num_hidden_layers");
  const auto attention = c.attention_heads(s.hidden);
  s.heads = attention.heads;
  s.kv_heads = attention.kv_heads;
  s.head_dim = attention.head_dim;
  s.eps = c.positive_number("rms_norm_eps", 1e-6);
  c.dimension("max_position_embeddings", 1);  // only validated: rotary positions need no table
  s.initializer_range = c.positive_number("initializer_range", 0.02);
  s.tie_embeddings = c.boolean("tie_word_embeddings", false);
  s.padding_idx = c.padding_idx(s.vocab);  // HF: nn.Embedding(vocab, hidden, pad_token_id)
  s.top_k = c.dimension("num_experts_per_tok");
  if (c.boolean("output_router_logits", false)) s.aux_loss_coef = c.number("router_aux_loss_coef", 0.001);
  const std::string act = c.string("hidden_act", "silu");
  SO_CHECK(s.family == Family::gpt_oss || act == "silu",
           c.path() << ": hidden_act \"" << act << "\" is not supported by the moe plugin (silu only)");

  switch (s.family) {
    case Family::qwen3_moe:
      // Published configs say num_experts; transformers 5 writes num_local_experts.
      s.experts = c.has("num_experts") ? c.dimension("num_experts") : c.dimension("num_local_experts");
      s.expert_intermediate = c.dimension("moe_intermediate_size");
      s.dense_intermediate = c.dimension("intermediate_size");
      s.norm_topk_prob = c.boolean("norm_topk_prob", false);
      s.attention_bias = c.boolean("attention_bias", false);
      break;
    case Family::mixtral:
      s.experts = c.dimension("num_local_experts");
      s.expert_intermediate = c.dimension("intermediate_size");
      SO_CHECK(c.number("router_jitter_noise", 0.0) == 0.0,
               c.path() << ": router_jitter_noise > 0 is not supported (the published Mixtral configs use 0)");
      break;
    case Family::gpt_oss:
      s.experts = c.dimension("num_local_experts");
      s.expert_intermediate = c.dimension("intermediate_size");
      s.attention_bias = c.boolean("attention_bias", true);
      s.swiglu_alpha = c.number("swiglu_alpha", 1.702);
      s.swiglu_limit = c.number("swiglu_limit", 7.0);
      break;
  }
  SO_CHECK(s.top_k >= 1 && s.top_k <= s.experts,
           c.path() << ": num_experts_per_tok " << s.top_k << " must lie in [1, " << s.experts << "]");

  // Which layers are MoE: all, except Qwen3-MoE's mlp_only_layers and decoder_sparse_step.
  s.sparse.assign(static_cast<size_t>(s.layers), true);
  if (s.family == Family::qwen3_moe) {
    const int64_t step = c.integer("decoder_sparse_step", 1);
    std::vector<int64_t> dense_only;
    if (c.has("mlp_only_layers")) dense_only = c.raw().at("mlp_only_layers").get<std::vector<int64_t>>();
    for (int64_t i = 0; i < s.layers; ++i) {
      const bool listed = std::find(dense_only.begin(), dense_only.end(), i) != dense_only.end();
      s.sparse[static_cast<size_t>(i)] = !listed && s.experts > 0 && step > 0 && (i + 1) % step == 0;
    }
  }

  const int64_t window = c.integer("sliding_window", s.family == Family::gpt_oss ? 128 : 0);
  if (window < 0) c.invalid("sliding_window", "= " + std::to_string(window) + " must be >= 0 (0: full attention)");
  s.sliding_window.assign(static_cast<size_t>(s.layers), 0);
  auto types = c.layer_types(s.layers);
  if (types.empty() && s.family == Family::gpt_oss) {
    for (int64_t i = 0; i < s.layers; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  }
  if (!types.empty()) {
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] == "sliding_attention") s.sliding_window[i] = window;
    }
  } else if (window > 0 && (s.family == Family::mixtral || c.boolean("use_sliding_window", false))) {
    const int64_t first = s.family == Family::mixtral ? 0 : c.integer("max_window_layers", s.layers);
    if (first < 0) c.invalid("max_window_layers", "= " + std::to_string(first) + " must be >= 0");
    for (int64_t i = first; i < s.layers; ++i) s.sliding_window[static_cast<size_t>(i)] = window;
  }
  return s;
}

// One SwiGLU expert with its HF module names (Qwen3-MoE: gate/up/down_proj; Mixtral: w1/w3/w2).
class Expert : public torch::nn::Module {
 public:
  Expert(const Settings& s, int64_t intermediate) {
    const bool mixtral = s.family == Family::mixtral;
    gate = register_module(mixtral ? "w1" : "gate_proj", std::make_shared<Linear>(s.hidden, intermediate, false));
    up = register_module(mixtral ? "w3" : "up_proj", std::make_shared<Linear>(s.hidden, intermediate, false));
    down = register_module(mixtral ? "w2" : "down_proj", std::make_shared<Linear>(intermediate, s.hidden, false));
  }
  std::shared_ptr<Linear> gate, up, down;
};

// GPT-OSS experts: all experts' weights in 3-D tensors, gate and up interleaved.
class FusedExperts : public torch::nn::Module {
 public:
  explicit FusedExperts(const Settings& s) : alpha_(s.swiglu_alpha), limit_(s.swiglu_limit) {
    const int64_t e = s.experts, h = s.hidden, i = s.expert_intermediate;
    gate_up_proj = register_parameter("gate_up_proj", at::empty({e, h, 2 * i}));
    gate_up_proj_bias = register_parameter("gate_up_proj_bias", at::zeros({e, 2 * i}));
    down_proj = register_parameter("down_proj", at::empty({e, i, h}));
    down_proj_bias = register_parameter("down_proj_bias", at::zeros({e, h}));
  }
  // The experts' current tensors (ZeRO-3 rebinds their data on every gather).
  ClampedSwiglu tensors() const {
    return {gate_up_proj, gate_up_proj_bias, down_proj, down_proj_bias, alpha_, limit_};
  }
  at::Tensor gate_up_proj, gate_up_proj_bias, down_proj, down_proj_bias;

 private:
  double alpha_, limit_;
};

// Experts "0", "1", … as children, so their names are experts.<e>.<projection>.weight.
class ExpertList : public torch::nn::Module {
 public:
  ExpertList(const Settings& s) {
    for (int64_t e = 0; e < s.experts; ++e) {
      experts.push_back(register_module(std::to_string(e), std::make_shared<Expert>(s, s.expert_intermediate)));
    }
  }
  std::vector<std::shared_ptr<Expert>> experts;
};

class SparseMoe : public torch::nn::Module {
 public:
  explicit SparseMoe(const Settings& s) : s_(s) {
    if (s.family == Family::gpt_oss) {
      router = register_module("router", std::make_shared<Linear>(s.hidden, s.experts, true));
      fused = register_module("experts", std::make_shared<FusedExperts>(s));
    } else {
      router = register_module("gate", std::make_shared<Linear>(s.hidden, s.experts, false));
      list = register_module("experts", std::make_shared<ExpertList>(s));
    }
  }

  at::Tensor forward(const at::Tensor& x, const BatchContext& context) {
    const auto shape = x.sizes().vec();
    const auto tokens = x.reshape({-1, s_.hidden});
    const auto logits = (*router)(tokens);  // [T, E]
    at::Tensor weights, indices;
    if (s_.family == Family::gpt_oss) {
      auto [top, idx] = logits.topk(s_.top_k, -1);
      weights = at::softmax(top, 1);
      indices = idx;
    } else {
      const auto probs = at::softmax(logits.to(at::kFloat), -1);
      auto [top, idx] = probs.topk(s_.top_k, -1);
      if (s_.family == Family::mixtral || s_.norm_topk_prob) top = top / top.sum(-1, true);
      weights = top.to(logits.scalar_type());
      indices = idx;
    }
    if (s_.aux_loss_coef > 0 && context.router_statistics) {
      context.router_statistics->push_back(model::router_statistics(logits, s_.top_k, s_.aux_loss_coef));
    }

    // The router above sees every token (its statistics pool the whole micro-batch, as HF's);
    // the experts, whose intermediate is the large tensor, run over tiles of tokens.
    const auto* self = this;  // outlives backward's recompute of each tile
    const auto* group = context.expert_parallel != nullptr && context.expert_parallel->size() > 1
                            ? context.expert_parallel
                            : nullptr;
    return model::over_token_tiles({tokens, weights, indices}, context.tile_tokens,
                                   [self, group](const std::vector<at::Tensor>& tile) {
                                     return self->experts(tile[0], tile[1], tile[2], group);
                                   })
        .view(shape);
  }

  // Each token's weighted sum of its top-k experts' outputs: [tokens, hidden]. Under expert
  // parallelism (`group`) the pairs are computed by their experts' ranks.
  at::Tensor experts(const at::Tensor& tokens, const at::Tensor& weights, const at::Tensor& indices,
                     const model::ExpertParallelGroup* group) const {
    const auto routed = route_pairs(indices, weights, s_.experts);
    const auto input = tokens.index_select(0, routed.token);
    if (group == nullptr) return combine_pairs(compute(input, routed, {0, s_.experts}), routed, s_.top_k);
    const auto local = group->local(s_.experts);
    const auto outputs = model::dispatch_to_experts(*group, input, routed.ends, [&](const model::LocalExpertRows& rows) {
      RoutedPairs here;
      here.expert = rows.expert;
      here.ends = rows.ends;
      return compute(rows.rows, here, local);
    });
    return combine_pairs(outputs, routed, s_.top_k);
  }

  // The experts `experts` (all of them, or this rank's) on their pairs, sorted by expert:
  // `routed.expert` counts from experts.first, `routed.ends` has one entry per expert here.
  at::Tensor compute(const at::Tensor& input, const RoutedPairs& routed, model::ExpertRange experts) const {
    const bool loop = per_expert_loop();
    // GPT-OSS's stacked tensors hold this rank's experts only (the engine binds those rows).
    if (fused) return loop ? clamped_experts_loop(input, routed, fused->tensors()) : clamped_experts_grouped(input, routed, fused->tensors());
    std::vector<at::Tensor> gate, up, down;
    for (int64_t e = experts.first; e < experts.first + experts.count; ++e) {
      const auto& expert = list->experts[static_cast<size_t>(e)];
      gate.push_back(expert->gate->weight);
      up.push_back(expert->up->weight);
      down.push_back(expert->down->weight);
    }
    return loop ? swiglu_experts_loop(input, routed, gate, up, down) : swiglu_experts_grouped(input, routed, gate, up, down);
  }

  std::shared_ptr<Linear> router;
  std::shared_ptr<ExpertList> list;
  std::shared_ptr<FusedExperts> fused;

 private:
  // SUPEROFFLOAD_MOE_EXPERTS=loop: the per-expert reference instead of the grouped products.
  static bool per_expert_loop() {
    const char* path = std::getenv("SUPEROFFLOAD_MOE_EXPERTS");
    return path != nullptr && std::strcmp(path, "loop") == 0;
  }

  Settings s_;
};

class DecoderBlock : public model::Layer {
 public:
  DecoderBlock(const Settings& s, int64_t index, std::shared_ptr<const model::Rotary> rotary)
      : Layer("model.layers." + std::to_string(index) + "."),
        rotary_(std::move(rotary)),
        window_(s.sliding_window[static_cast<size_t>(index)]),
        experts_(s.experts),
        mixtral_(s.family == Family::mixtral) {
    const model::SelfAttentionOptions attention{.hidden = s.hidden,
                                                .heads = s.heads,
                                                .kv_heads = s.kv_heads,
                                                .head_dim = s.head_dim,
                                                .qkv_bias = s.attention_bias,
                                                .o_bias = s.attention_bias && s.family == Family::gpt_oss,
                                                .fused_qkv = false,
                                                .qk_norm = s.family == Family::qwen3_moe,
                                                .norm_eps = s.eps,
                                                .sinks = s.family == Family::gpt_oss};
    self_attn = register_module("self_attn", std::make_shared<model::SelfAttention>(attention));
    if (s.sparse[static_cast<size_t>(index)]) {
      moe = register_module(s.family == Family::mixtral ? "block_sparse_moe" : "mlp", std::make_shared<SparseMoe>(s));
    } else {
      dense = register_module("mlp", std::make_shared<model::SwigluMlp>(model::SwigluMlpOptions{.hidden = s.hidden, .intermediate = s.dense_intermediate}));
    }
    input_layernorm = register_module("input_layernorm", std::make_shared<model::RMSNorm>(s.hidden, s.eps));
    post_attention_layernorm =
        register_module("post_attention_layernorm", std::make_shared<model::RMSNorm>(s.hidden, s.eps));
  }
  at::Tensor forward(const at::Tensor& x, const BatchContext& context) override {
    const auto [cos, sin] = rotary_->cos_sin(context.position_ids, x.scalar_type());
    const auto h = x + self_attn->forward((*input_layernorm)(x), cos, sin, window_, context);
    const auto normed = (*post_attention_layernorm)(h);
    if (moe) return h + moe->forward(normed, context);
    const auto* mlp = dense.get();  // outlives backward's recompute of each tile
    return h + model::over_token_tiles(normed, context.tile_tokens,
                                       [mlp](const at::Tensor& tokens) { return mlp->forward(tokens); });
  }
  int64_t expert_count() const override { return moe ? experts_ : 0; }
  // Qwen3-MoE, Mixtral: "<prefix>mlp.experts.<e>.<projection>.weight" belongs to expert e;
  // GPT-OSS: "<prefix>mlp.experts.<tensor>" stacks all experts along its first dimension.
  int64_t expert_of(const std::string& hf_name) const override {
    if (!moe) return kSharedParameter;
    const std::string stem = hf_prefix() + (mixtral_ ? "block_sparse_moe" : "mlp") + ".experts.";
    if (hf_name.rfind(stem, 0) != 0) return kSharedParameter;
    if (moe->fused) return kStackedExperts;
    const auto rest = hf_name.substr(stem.size());
    return std::stoll(rest.substr(0, rest.find('.')));
  }
  std::shared_ptr<model::SelfAttention> self_attn;
  std::shared_ptr<SparseMoe> moe;
  std::shared_ptr<model::SwigluMlp> dense;
  std::shared_ptr<model::RMSNorm> input_layernorm, post_attention_layernorm;

 private:
  std::shared_ptr<const model::Rotary> rotary_;
  int64_t window_;
  int64_t experts_;
  bool mixtral_;
};

class MoeModel : public model::CausalLM {
 public:
  explicit MoeModel(const HfConfig& config) : s_(read_settings(config)) {
    // GPT-OSS configs without rope settings mean YaRN with these values (HF's defaults).
    nlohmann::json rope_defaults;
    if (s_.family == Family::gpt_oss) {
      rope_defaults = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                       {"truncate", false}, {"original_max_position_embeddings", 4096}, {"rope_theta", 150000.0}};
    }
    auto rotary = std::make_shared<const model::Rotary>(config, s_.head_dim, rope_defaults);
    auto embedding = std::make_shared<model::TokenEmbeddingLayer>(s_.vocab, s_.hidden, s_.padding_idx);
    layers_.push_back(embedding);
    for (int64_t i = 0; i < s_.layers; ++i) layers_.push_back(std::make_shared<DecoderBlock>(s_, i, rotary));
    layers_.push_back(
        std::make_shared<model::NormHeadLayer>(s_.hidden, s_.vocab, s_.eps, s_.tie_embeddings ? embedding : nullptr));
  }
  const std::vector<std::shared_ptr<model::Layer>>& layers() const override { return layers_; }
  bool is_moe() const override { return true; }
  model::ModelShape shape() const override {
    model::ModelShape shape{s_.layers, s_.hidden, s_.vocab, 0, 0};
    shape.total_parameters = parameter_count();
    const int64_t expert_parameters = parameter_count(".experts.");
    // A token passes through top_k of the experts' weights.
    shape.active_parameters =
        shape.total_parameters - expert_parameters + expert_parameters * s_.top_k / std::max<int64_t>(1, s_.experts);
    return shape;
  }
  std::vector<std::pair<std::string, std::string>> tied_parameters() const override {
    if (!s_.tie_embeddings) return {};
    return {{"model.embed_tokens.weight", "lm_head.weight"}};
  }
  double initializer_range() const override { return s_.initializer_range; }

 private:
  Settings s_;
  std::vector<std::shared_ptr<model::Layer>> layers_;
};

std::unique_ptr<model::CausalLM> make_model(const HfConfig& config) { return std::make_unique<MoeModel>(config); }

const char* const kArchitectures[] = {"Qwen3MoeForCausalLM", "MixtralForCausalLM", "GptOssForCausalLM", nullptr};
// The expert count's key differs by family (num_experts, num_local_experts): checked when built.
const char* const kRequiredKeys[] = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                     "num_experts_per_tok", nullptr};

}  // namespace
}  // namespace superoffload::plugins::moe

SUPEROFFLOAD_PLUGIN("moe", "1.0.0", superoffload::plugins::moe::kArchitectures,
                    superoffload::plugins::moe::kRequiredKeys, &superoffload::plugins::moe::make_model)
