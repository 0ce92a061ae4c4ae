// The gpt2 plugin: GPT2LMHeadModel — learned positions, pre-LayerNorm blocks, tanh-GELU,
// fused c_attn, HF's Conv1D weight layout ([in, out], y = x W + b) and a head tied to wte.
#include <cmath>

#include "base/error.hpp"
#include "model/blocks/sequence_parallel_attention.hpp"
#include "model/blocks/token_tiles.hpp"
#include "model/plugin.hpp"

namespace superoffload::plugins::gpt2 {
namespace {

using model::BatchContext;
using model::HfConfig;

struct Settings {
  int64_t vocab = 0, positions = 0, hidden = 0, layers = 0, heads = 0, inner = 0;
  double eps = 1e-5, initializer_range = 0.02;
};

Settings read_settings(const HfConfig& c) {
  Settings s;
  s.vocab = c.dimension("vocab_size");
  s.positions = c.dimension("n_positions");
  s.hidden = c.dimension("n_embd");
  s.layers = c.dimension("n_layer");
  s.heads = c.dimension("n_head");
  if (s.hidden % s.heads != 0) {
    c.invalid("n_head", "= " + std::to_string(s.heads) + " must divide n_embd = " + std::to_string(s.hidden));
  }
  s.inner = c.dimension("n_inner", 4 * s.hidden);
  s.eps = c.positive_number("layer_norm_epsilon", 1e-5);
  s.initializer_range = c.positive_number("initializer_range", 0.02);
  const auto act = c.string("activation_function", "gelu_new");
  SO_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
           c.path() << ": activation_function \"" << act << "\" is not supported by the gpt2 plugin (gelu_new)");
  SO_CHECK(!c.boolean("scale_attn_by_inverse_layer_idx", false) && !c.boolean("reorder_and_upcast_attn", false),
           c.path() << ": scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not supported");
  SO_CHECK(s.hidden % s.heads == 0, c.path() << ": n_embd " << s.hidden << " is not a multiple of n_head " << s.heads);
  return s;
}

// HF's Conv1D: weight [in, out].
class Conv1D : public torch::nn::Module {
 public:
  Conv1D(int64_t in, int64_t out) {
    weight = register_parameter("weight", at::empty({in, out}));
    bias = register_parameter("bias", at::zeros({out}));
  }
  at::Tensor operator()(const at::Tensor& x) const { return at::addmm(bias, x.reshape({-1, x.size(-1)}), weight).view(
      [&] { auto shape = x.sizes().vec(); shape.back() = weight.size(1); return shape; }()); }
  at::Tensor weight, bias;
};

class LayerNorm : public torch::nn::Module {
 public:
  LayerNorm(int64_t size, double eps) : eps_(eps) {
    weight = register_parameter("weight", at::ones({size}));
    bias = register_parameter("bias", at::zeros({size}));
  }
  at::Tensor operator()(const at::Tensor& x) const { return at::layer_norm(x, {weight.size(0)}, weight, bias, eps_); }
  at::Tensor weight, bias;

 private:
  double eps_;
};

class Table : public torch::nn::Module {
 public:
  Table(int64_t rows, int64_t width) { weight = register_parameter("weight", at::empty({rows, width})); }
  at::Tensor weight;
};

class Attention : public torch::nn::Module {
 public:
  explicit Attention(const Settings& s) : heads_(s.heads) {
    c_attn = register_module("c_attn", std::make_shared<Conv1D>(s.hidden, 3 * s.hidden));
    c_proj = register_module("c_proj", std::make_shared<Conv1D>(s.hidden, s.hidden));
  }
  at::Tensor forward(const at::Tensor& x, const BatchContext& context) {
    const int64_t b = x.size(0), t = x.size(1), h = x.size(2), d = h / heads_;
    const auto qkv = (*c_attn)(x).split(h, -1);
    auto shape = [&](const at::Tensor& y) { return y.view({b, t, heads_, d}).transpose(1, 2); };
    return (*c_proj)(model::causal_attention_in_context(shape(qkv[0]), shape(qkv[1]), shape(qkv[2]), 0, {}, context));
  }
  std::shared_ptr<Conv1D> c_attn, c_proj;

 private:
  int64_t heads_;
};

class Mlp : public torch::nn::Module {
 public:
  explicit Mlp(const Settings& s) {
    c_fc = register_module("c_fc", std::make_shared<Conv1D>(s.hidden, s.inner));
    c_proj = register_module("c_proj", std::make_shared<Conv1D>(s.inner, s.hidden));
  }
  at::Tensor forward(const at::Tensor& x) const { return (*c_proj)(at::gelu((*c_fc)(x), "tanh")); }
  std::shared_ptr<Conv1D> c_fc, c_proj;
};

class EmbeddingLayer : public model::Layer {
 public:
  explicit EmbeddingLayer(const Settings& s) : Layer("transformer.") {
    wte = register_module("wte", std::make_shared<Table>(s.vocab, s.hidden));
    wpe = register_module("wpe", std::make_shared<Table>(s.positions, s.hidden));
  }
  at::Tensor forward(const at::Tensor& ids, const BatchContext& context) override {
    return at::embedding(wte->weight, ids) + at::embedding(wpe->weight, context.position_ids);
  }
  std::shared_ptr<Table> wte, wpe;
};

class Block : public model::Layer {
 public:
  Block(const Settings& s, int64_t index) : Layer("transformer.h." + std::to_string(index) + ".") {
    ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(s.hidden, s.eps));
    attn = register_module("attn", std::make_shared<Attention>(s));
    ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(s.hidden, s.eps));
    mlp = register_module("mlp", std::make_shared<Mlp>(s));
  }
  at::Tensor forward(const at::Tensor& x, const BatchContext& context) override {
    const auto h = x + attn->forward((*ln_1)(x), context);
    const auto* m = mlp.get();  // the module outlives backward's recompute of each tile
    return h + model::over_token_tiles((*ln_2)(h), context.tile_tokens,
                                       [m](const at::Tensor& tokens) { return m->forward(tokens); });
  }
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<Mlp> mlp;
};

class FinalNorm : public torch::nn::Module {
 public:
  FinalNorm(int64_t hidden, double eps) { ln_f = register_module("ln_f", std::make_shared<LayerNorm>(hidden, eps)); }
  std::shared_ptr<LayerNorm> ln_f;
};

// GPT-2's head is always the transposed token embedding.
class Head : public model::HeadLayer {
 public:
  Head(const Settings& s, std::shared_ptr<EmbeddingLayer> embedding) : HeadLayer(""), embedding_(std::move(embedding)) {
    transformer = register_module("transformer", std::make_shared<FinalNorm>(s.hidden, s.eps));
  }
  at::Tensor forward(const at::Tensor& hidden, const BatchContext&) override {
    return at::linear((*transformer->ln_f)(hidden), embedding_->wte->weight);
  }
  std::shared_ptr<FinalNorm> transformer;

 private:
  std::shared_ptr<EmbeddingLayer> embedding_;
};

class Gpt2Model : public model::CausalLM {
 public:
  explicit Gpt2Model(const HfConfig& config) : s_(read_settings(config)) {
    auto embedding = std::make_shared<EmbeddingLayer>(s_);
    layers_.push_back(embedding);
    for (int64_t i = 0; i < s_.layers; ++i) layers_.push_back(std::make_shared<Block>(s_, i));
    layers_.push_back(std::make_shared<Head>(s_, embedding));
  }
  const std::vector<std::shared_ptr<model::Layer>>& layers() const override { return layers_; }
  model::ModelShape shape() const override {
    model::ModelShape shape{s_.layers, s_.hidden, s_.vocab, 0, 0};
    shape.total_parameters = parameter_count();
    shape.active_parameters = shape.total_parameters;
    return shape;
  }
  std::vector<std::pair<std::string, std::string>> tied_parameters() const override {
    return {{"transformer.wte.weight", "lm_head.weight"}};
  }
  double initializer_range() const override { return s_.initializer_range; }
  // GPT-2's LayerNorms are ln_1, ln_2 and ln_f, which HF Trainer finds by module type, not name.
  model::ParameterRole parameter_role(const std::string& hf_name) const override {
    if (hf_name.find(".ln_") != std::string::npos && hf_name.size() > 7 &&
        hf_name.compare(hf_name.size() - 7, 7, ".weight") == 0) {
      return model::ParameterRole::norm;
    }
    return model::parameter_role_by_name(hf_name);
  }
  std::string checkpoint_prefix() const override { return "transformer."; }
  bool ignorable_checkpoint_tensor(const std::string& name) const override {
    // The causal-mask buffers older checkpoints carry.
    return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
  }

 private:
  Settings s_;
  std::vector<std::shared_ptr<model::Layer>> layers_;
};

std::unique_ptr<model::CausalLM> make_model(const HfConfig& config) { return std::make_unique<Gpt2Model>(config); }

const char* const kArchitectures[] = {"GPT2LMHeadModel", nullptr};
const char* const kRequiredKeys[] = {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", nullptr};

}  // namespace
}  // namespace superoffload::plugins::gpt2

SUPEROFFLOAD_PLUGIN("gpt2", "1.0.0", superoffload::plugins::gpt2::kArchitectures,
                    superoffload::plugins::gpt2::kRequiredKeys, &superoffload::plugins::gpt2::make_model)
