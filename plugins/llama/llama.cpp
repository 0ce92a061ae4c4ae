// The llama plugin: decoder-only transformers with RMSNorm, RoPE, grouped-query attention and
// SwiGLU — LlamaForCausalLM (Llama 2, 3.x), MistralForCausalLM, Qwen2ForCausalLM (q/k/v bias),
// Qwen3ForCausalLM (per-head q/k RMSNorm), Phi3ForCausalLM (fused qkv_proj and gate_up_proj;
// Phi-4) and SeedOssForCausalLM. Parameter names are exactly HF's.
#include "base/error.hpp"
#include "model/blocks/decoder_layers.hpp"
#include "model/blocks/linear.hpp"
#include "model/blocks/rms_norm.hpp"
#include "model/blocks/rotary.hpp"
#include "model/blocks/self_attention.hpp"
#include "model/blocks/swiglu.hpp"
#include "model/blocks/token_tiles.hpp"
#include "model/plugin.hpp"

namespace superoffload::plugins::llama {
namespace {

using model::BatchContext;
using model::HfConfig;
using model::Linear;
using model::RMSNorm;
using model::Rotary;

struct Settings {
  std::string architecture;
  int64_t vocab = 0, hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double eps = 1e-6, initializer_range = 0.02;
  int64_t padding_idx = -1;  // embedding row without gradient (pad_token_id), -1: none
  bool tie_embeddings = false;
  bool qkv_bias = false, o_bias = false, mlp_bias = false;
  bool qk_norm = false;  // Qwen3
  bool fused = false;    // Phi3: qkv_proj, gate_up_proj
  std::vector<int64_t> sliding_window;  // per layer, 0 = full attention
};

Settings read_settings(const HfConfig& c) {
  Settings s;
  s.architecture = c.architecture();
  s.vocab = c.dimension("vocab_size");
  s.hidden = c.dimension("hidden_size");
  s.intermediate = c.dimension("intermediate_size");
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
  const std::string act = c.string("hidden_act", "silu");
  SO_CHECK(act == "silu", c.path() << ": hidden_act \"" << act << "\" is not supported by the llama plugin (silu only)");

  const std::string& a = s.architecture;
  if (a == "Qwen2ForCausalLM") {
    s.qkv_bias = true;
  } else if (a == "Phi3ForCausalLM") {
    s.fused = true;
  } else if (a == "SeedOssForCausalLM") {
    s.qkv_bias = c.boolean("attention_bias", true);
    s.o_bias = c.boolean("attention_out_bias", false);
    s.mlp_bias = c.boolean("mlp_bias", false);
  } else if (a == "MistralForCausalLM") {
  } else {  // Llama, Qwen3
    s.qkv_bias = s.o_bias = c.boolean("attention_bias", false);
    s.mlp_bias = c.boolean("mlp_bias", false);
  }
  s.qk_norm = a == "Qwen3ForCausalLM";

  // Sliding windows: an explicit per-layer list where config.json has one; otherwise
  // Mistral/Phi3 slide on every layer when sliding_window is set, and Qwen2/Qwen3 on layers
  // from max_window_layers on when use_sliding_window is true.
  const int64_t window = c.integer("sliding_window", 0);
  if (window < 0) c.invalid("sliding_window", "= " + std::to_string(window) + " must be >= 0 (0: full attention)");
  s.sliding_window.assign(static_cast<size_t>(s.layers), 0);
  const auto types = c.layer_types(s.layers);
  if (!types.empty()) {
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] == "sliding_attention") s.sliding_window[i] = window;
    }
  } else if (window > 0 && (a == "MistralForCausalLM" || a == "Phi3ForCausalLM")) {
    s.sliding_window.assign(static_cast<size_t>(s.layers), window);
  } else if (window > 0 && c.boolean("use_sliding_window", false)) {
    const int64_t first = c.integer("max_window_layers", s.layers);
    if (first < 0) c.invalid("max_window_layers", "= " + std::to_string(first) + " must be >= 0");
    for (int64_t i = first; i < s.layers; ++i) s.sliding_window[static_cast<size_t>(i)] = window;
  }
  return s;
}

class DecoderBlock : public model::Layer {
 public:
  DecoderBlock(const Settings& s, int64_t index, std::shared_ptr<const Rotary> rotary)
      : Layer("model.layers." + std::to_string(index) + "."),
        rotary_(std::move(rotary)),
        window_(s.sliding_window[static_cast<size_t>(index)]) {
    const model::SelfAttentionOptions attention{.hidden = s.hidden,
                                                .heads = s.heads,
                                                .kv_heads = s.kv_heads,
                                                .head_dim = s.head_dim,
                                                .qkv_bias = s.qkv_bias,
                                                .o_bias = s.o_bias,
                                                .fused_qkv = s.fused,
                                                .qk_norm = s.qk_norm,
                                                .norm_eps = s.eps,
                                                .sinks = false};
    self_attn = register_module("self_attn", std::make_shared<model::SelfAttention>(attention));
    mlp = register_module("mlp", std::make_shared<model::SwigluMlp>(model::SwigluMlpOptions{
                                         .hidden = s.hidden, .intermediate = s.intermediate, .bias = s.mlp_bias, .fused = s.fused}));
    input_layernorm = register_module("input_layernorm", std::make_shared<RMSNorm>(s.hidden, s.eps));
    post_attention_layernorm = register_module("post_attention_layernorm", std::make_shared<RMSNorm>(s.hidden, s.eps));
  }
  at::Tensor forward(const at::Tensor& x, const BatchContext& context) override {
    const auto [cos, sin] = rotary_->cos_sin(context.position_ids, x.scalar_type());
    const auto h = x + self_attn->forward((*input_layernorm)(x), cos, sin, window_, context);
    const auto* m = mlp.get();  // the module outlives backward's recompute of each tile
    return h + model::over_token_tiles((*post_attention_layernorm)(h), context.tile_tokens,
                                       [m](const at::Tensor& tokens) { return m->forward(tokens); });
  }
  std::shared_ptr<model::SelfAttention> self_attn;
  std::shared_ptr<model::SwigluMlp> mlp;
  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;

 private:
  std::shared_ptr<const Rotary> rotary_;
  int64_t window_;
};

class LlamaModel : public model::CausalLM {
 public:
  explicit LlamaModel(const HfConfig& config) : s_(read_settings(config)) {
    auto rotary = std::make_shared<const Rotary>(config, s_.head_dim);
    auto embedding = std::make_shared<model::TokenEmbeddingLayer>(s_.vocab, s_.hidden, s_.padding_idx);
    layers_.push_back(embedding);
    for (int64_t i = 0; i < s_.layers; ++i) layers_.push_back(std::make_shared<DecoderBlock>(s_, i, rotary));
    layers_.push_back(
        std::make_shared<model::NormHeadLayer>(s_.hidden, s_.vocab, s_.eps, s_.tie_embeddings ? embedding : nullptr));
  }
  const std::vector<std::shared_ptr<model::Layer>>& layers() const override { return layers_; }
  model::ModelShape shape() const override {
    model::ModelShape shape{s_.layers, s_.hidden, s_.vocab, 0, 0};
    shape.total_parameters = parameter_count();
    shape.active_parameters = shape.total_parameters;
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

std::unique_ptr<model::CausalLM> make_model(const HfConfig& config) { return std::make_unique<LlamaModel>(config); }

const char* const kArchitectures[] = {"LlamaForCausalLM",  "MistralForCausalLM", "Qwen2ForCausalLM",
                                      "Qwen3ForCausalLM",  "Phi3ForCausalLM",    "SeedOssForCausalLM",
                                      nullptr};
// Every architecture here builds from these; the rest have HF's defaults.
const char* const kRequiredKeys[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                     "num_attention_heads", nullptr};

}  // namespace
}  // namespace superoffload::plugins::llama

SUPEROFFLOAD_PLUGIN("llama", "1.0.0", superoffload::plugins::llama::kArchitectures,
                    superoffload::plugins::llama::kRequiredKeys, &superoffload::plugins::llama::make_model)
