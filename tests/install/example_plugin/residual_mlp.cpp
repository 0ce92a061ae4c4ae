// An out-of-tree architecture, "ResidualMlpForCausalLM": token embedding, N blocks of
// x + W2·relu(W1·x), final RMSNorm and LM head — small enough to check by hand in Python.
#include <superoffload/model/blocks/decoder_layers.hpp>
#include <superoffload/model/blocks/linear.hpp>
#include <superoffload/model/plugin.hpp>

namespace {

namespace m = superoffload::model;

class Block : public m::Layer {
 public:
  Block(int64_t index, int64_t hidden, int64_t inner) : Layer("model.layers." + std::to_string(index) + ".") {
    up = register_module("up", std::make_shared<m::Linear>(hidden, inner, true));
    down = register_module("down", std::make_shared<m::Linear>(inner, hidden, true));
  }
  at::Tensor forward(const at::Tensor& x, const m::BatchContext&) override { return x + (*down)(at::relu((*up)(x))); }
  std::shared_ptr<m::Linear> up, down;
};

class ResidualMlp : public m::CausalLM {
 public:
  explicit ResidualMlp(const m::HfConfig& c)
      : vocab_(c.integer("vocab_size")), hidden_(c.integer("hidden_size")), layers_count_(c.integer("num_hidden_layers")) {
    auto embedding = std::make_shared<m::TokenEmbeddingLayer>(vocab_, hidden_);
    layers_.push_back(embedding);
    for (int64_t i = 0; i < layers_count_; ++i) {
      layers_.push_back(std::make_shared<Block>(i, hidden_, c.integer("intermediate_size")));
    }
    layers_.push_back(std::make_shared<m::NormHeadLayer>(hidden_, vocab_, c.number("rms_norm_eps", 1e-6), nullptr));
  }
  const std::vector<std::shared_ptr<m::Layer>>& layers() const override { return layers_; }
  m::ModelShape shape() const override {
    m::ModelShape s{layers_count_, hidden_, vocab_, 0, 0};
    s.total_parameters = parameter_count();
    s.active_parameters = s.total_parameters;
    return s;
  }
  double initializer_range() const override { return 0.02; }

 private:
  int64_t vocab_, hidden_, layers_count_;
  std::vector<std::shared_ptr<m::Layer>> layers_;
};

std::unique_ptr<m::CausalLM> make(const m::HfConfig& config) { return std::make_unique<ResidualMlp>(config); }
const char* const kArchitectures[] = {"ResidualMlpForCausalLM", nullptr};
const char* const kRequiredKeys[] = {"vocab_size", "hidden_size", "num_hidden_layers", nullptr};

}  // namespace

SUPEROFFLOAD_PLUGIN("residual_mlp", "0.1.0", kArchitectures, kRequiredKeys, &make)
