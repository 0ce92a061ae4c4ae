// The llama plugin: decoder-only transformers with RMSNorm, RoPE, grouped-query attention and
// SwiGLU — LlamaForCausalLM (Llama 2, 3.x), MistralForCausalLM, Qwen2ForCausalLM (q/k/v bias),
// Qwen3ForCausalLM (per-head q/k RMSNorm), Phi3ForCausalLM (fused qkv_proj and gate_up_proj;
// Phi-4) and SeedOssForCausalLM. Parameter names are exactly HF's.
#include <torch/autograd.h>

#include "model/blocks/attention.hpp"
#include "model/blocks/linear.hpp"
#include "model/blocks/rms_norm.hpp"
#include "model/blocks/rotary.hpp"
#include "model/plugin.hpp"
#include "runtime/error.hpp"

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
  bool tie_embeddings = false;
  bool qkv_bias = false, o_bias = false, mlp_bias = false;
  bool qk_norm = false;  // Qwen3
  bool fused = false;    // Phi3: qkv_proj, gate_up_proj
  std::vector<int64_t> sliding_window;  // per layer, 0 = full attention
};

Settings read_settings(const HfConfig& c) {
  Settings s;
  s.architecture = c.architecture();
  s.vocab = c.integer("vocab_size");
  s.hidden = c.integer("hidden_size");
  s.intermediate = c.integer("intermediate_size");
  s.layers = c.integer("num_hidden_layers");
  s.heads = c.integer("num_attention_heads");
  s.kv_heads = c.integer("num_key_value_heads", s.heads);
  s.head_dim = c.integer("head_dim", s.hidden / s.heads);
  s.eps = c.number("rms_norm_eps", 1e-6);
  s.initializer_range = c.number("initializer_range", 0.02);
  s.tie_embeddings = c.boolean("tie_word_embeddings", false);
  SO_CHECK(s.heads % s.kv_heads == 0, c.path() << ": num_attention_heads " << s.heads
                                                << " is not a multiple of num_key_value_heads " << s.kv_heads);
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
  s.sliding_window.assign(static_cast<size_t>(s.layers), 0);
  const auto types = c.strings("layer_types");
  if (!types.empty()) {
    SO_CHECK(static_cast<int64_t>(types.size()) == s.layers,
             c.path() << ": layer_types has " << types.size() << " entries for " << s.layers << " layers");
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] == "sliding_attention") s.sliding_window[i] = window;
    }
  } else if (window > 0 && (a == "MistralForCausalLM" || a == "Phi3ForCausalLM")) {
    s.sliding_window.assign(static_cast<size_t>(s.layers), window);
  } else if (window > 0 && c.boolean("use_sliding_window", false)) {
    const int64_t first = c.integer("max_window_layers", s.layers);
    for (int64_t i = first; i < s.layers; ++i) s.sliding_window[static_cast<size_t>(i)] = window;
  }
  return s;
}

class Attention : public torch::nn::Module {
 public:
  explicit Attention(const Settings& s) : s_(s) {
    const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
    if (s.fused) {
      qkv_proj = register_module("qkv_proj", std::make_shared<Linear>(s.hidden, q + 2 * kv, false));
    } else {
      q_proj = register_module("q_proj", std::make_shared<Linear>(s.hidden, q, s.qkv_bias));
      k_proj = register_module("k_proj", std::make_shared<Linear>(s.hidden, kv, s.qkv_bias));
      v_proj = register_module("v_proj", std::make_shared<Linear>(s.hidden, kv, s.qkv_bias));
    }
    o_proj = register_module("o_proj", std::make_shared<Linear>(q, s.hidden, s.o_bias));
    if (s.qk_norm) {
      q_norm = register_module("q_norm", std::make_shared<RMSNorm>(s.head_dim, s.eps));
      k_norm = register_module("k_norm", std::make_shared<RMSNorm>(s.head_dim, s.eps));
    }
  }

  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t window) {
    const int64_t b = x.size(0), t = x.size(1);
    at::Tensor q, k, v;
    if (qkv_proj) {
      const auto qkv = (*qkv_proj)(x);
      const int64_t nq = s_.heads * s_.head_dim, nkv = s_.kv_heads * s_.head_dim;
      q = qkv.narrow(-1, 0, nq);
      k = qkv.narrow(-1, nq, nkv);
      v = qkv.narrow(-1, nq + nkv, nkv);
    } else {
      q = (*q_proj)(x);
      k = (*k_proj)(x);
      v = (*v_proj)(x);
    }
    q = q.view({b, t, s_.heads, s_.head_dim});
    k = k.view({b, t, s_.kv_heads, s_.head_dim});
    v = v.view({b, t, s_.kv_heads, s_.head_dim});
    if (q_norm) {
      q = (*q_norm)(q);
      k = (*k_norm)(k);
    }
    q = Rotary::apply(q.transpose(1, 2), cos, sin);
    k = Rotary::apply(k.transpose(1, 2), cos, sin);
    return (*o_proj)(model::causal_attention(q, k, v.transpose(1, 2), window));
  }

  std::shared_ptr<Linear> q_proj, k_proj, v_proj, qkv_proj, o_proj;
  std::shared_ptr<RMSNorm> q_norm, k_norm;

 private:
  Settings s_;
};

class Mlp : public torch::nn::Module {
 public:
  explicit Mlp(const Settings& s) {
    if (s.fused) {
      gate_up_proj = register_module("gate_up_proj", std::make_shared<Linear>(s.hidden, 2 * s.intermediate, false));
    } else {
      gate_proj = register_module("gate_proj", std::make_shared<Linear>(s.hidden, s.intermediate, s.mlp_bias));
      up_proj = register_module("up_proj", std::make_shared<Linear>(s.hidden, s.intermediate, s.mlp_bias));
    }
    down_proj = register_module("down_proj", std::make_shared<Linear>(s.intermediate, s.hidden, s.mlp_bias));
  }
  at::Tensor forward(const at::Tensor& x) {
    if (gate_up_proj) {
      const auto both = (*gate_up_proj)(x).chunk(2, -1);
      return (*down_proj)(both[1] * at::silu(both[0]));
    }
    return (*down_proj)(at::silu((*gate_proj)(x)) * (*up_proj)(x));
  }
  std::shared_ptr<Linear> gate_proj, up_proj, gate_up_proj, down_proj;
};

class Embedding : public torch::nn::Module {
 public:
  Embedding(int64_t vocab, int64_t hidden) { weight = register_parameter("weight", at::empty({vocab, hidden})); }
  at::Tensor weight;
};

class EmbeddingLayer : public model::Layer {
 public:
  explicit EmbeddingLayer(const Settings& s) : Layer("model.") {
    embed_tokens = register_module("embed_tokens", std::make_shared<Embedding>(s.vocab, s.hidden));
  }
  at::Tensor forward(const at::Tensor& ids, const BatchContext&) override {
    return at::embedding(embed_tokens->weight, ids);
  }
  std::shared_ptr<Embedding> embed_tokens;
};

class DecoderBlock : public model::Layer {
 public:
  DecoderBlock(const Settings& s, int64_t index, std::shared_ptr<const Rotary> rotary)
      : Layer("model.layers." + std::to_string(index) + "."),
        rotary_(std::move(rotary)),
        window_(s.sliding_window[static_cast<size_t>(index)]) {
    self_attn = register_module("self_attn", std::make_shared<Attention>(s));
    mlp = register_module("mlp", std::make_shared<Mlp>(s));
    input_layernorm = register_module("input_layernorm", std::make_shared<RMSNorm>(s.hidden, s.eps));
    post_attention_layernorm = register_module("post_attention_layernorm", std::make_shared<RMSNorm>(s.hidden, s.eps));
  }
  at::Tensor forward(const at::Tensor& x, const BatchContext& context) override {
    const auto [cos, sin] = rotary_->cos_sin(context.position_ids, x.scalar_type());
    const auto h = x + self_attn->forward((*input_layernorm)(x), cos, sin, window_);
    return h + mlp->forward((*post_attention_layernorm)(h));
  }
  std::shared_ptr<Attention> self_attn;
  std::shared_ptr<Mlp> mlp;
  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;

 private:
  std::shared_ptr<const Rotary> rotary_;
  int64_t window_;
};

// Holds the final norm under "model." so its HF name is model.norm.weight.
class FinalNorm : public torch::nn::Module {
 public:
  FinalNorm(int64_t hidden, double eps) { norm = register_module("norm", std::make_shared<RMSNorm>(hidden, eps)); }
  std::shared_ptr<RMSNorm> norm;
};

class Head : public model::HeadLayer {
 public:
  Head(const Settings& s, std::shared_ptr<EmbeddingLayer> tied_to) : HeadLayer(""), tied_to_(std::move(tied_to)) {
    model = register_module("model", std::make_shared<FinalNorm>(s.hidden, s.eps));
    if (!tied_to_) lm_head = register_module("lm_head", std::make_shared<Linear>(s.hidden, s.vocab, false));
  }
  at::Tensor forward(const at::Tensor& hidden, const BatchContext&) override {
    const auto normed = (*model->norm)(hidden);
    return lm_head ? (*lm_head)(normed) : at::linear(normed, tied_to_->embed_tokens->weight);
  }
  std::shared_ptr<FinalNorm> model;
  std::shared_ptr<Linear> lm_head;

 private:
  std::shared_ptr<EmbeddingLayer> tied_to_;
};

class LlamaModel : public model::CausalLM {
 public:
  explicit LlamaModel(const HfConfig& config) : s_(read_settings(config)) {
    auto rotary = std::make_shared<const Rotary>(config, s_.head_dim);
    auto embedding = std::make_shared<EmbeddingLayer>(s_);
    layers_.push_back(embedding);
    for (int64_t i = 0; i < s_.layers; ++i) layers_.push_back(std::make_shared<DecoderBlock>(s_, i, rotary));
    layers_.push_back(std::make_shared<Head>(s_, s_.tie_embeddings ? embedding : nullptr));
  }
  const std::vector<std::shared_ptr<model::Layer>>& layers() const override { return layers_; }
  model::ModelShape shape() const override {
    model::ModelShape shape{s_.layers, s_.hidden, s_.vocab, 0, 0};
    for (const auto& layer : layers_) {
      for (const auto& [name, tensor] : layer->hf_parameters()) shape.total_parameters += tensor.numel();
    }
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

}  // namespace
}  // namespace superoffload::plugins::llama

SUPEROFFLOAD_PLUGIN("llama", "1.0.0", superoffload::plugins::llama::kArchitectures,
                    &superoffload::plugins::llama::make_model)
