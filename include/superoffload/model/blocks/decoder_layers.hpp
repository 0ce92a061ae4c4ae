// The first and last layers most HF decoder LMs share: token embedding
// (model.embed_tokens.weight) and final RMSNorm + LM head (model.norm.weight,
// lm_head.weight, or the embedding's weight when tie_word_embeddings).
#pragma once

#include "model/blocks/linear.hpp"
#include "model/blocks/rms_norm.hpp"
#include "model/causal_lm.hpp"

namespace superoffload::model {

// A bare weight matrix under a module name ("embed_tokens.weight").
class WeightTable : public torch::nn::Module {
 public:
  WeightTable(int64_t rows, int64_t columns) { weight = register_parameter("weight", at::empty({rows, columns})); }
  at::Tensor weight;
};

// With a `padding_idx` (>= 0, HfConfig::padding_idx), that row gets no gradient from the
// lookup, as in HF's nn.Embedding(vocab, hidden, padding_idx): Adam never moves it (decay
// aside), though a tied LM head's gradient still reaches it, as in HF.
class TokenEmbeddingLayer : public Layer {
 public:
  TokenEmbeddingLayer(int64_t vocab, int64_t hidden, int64_t padding_idx = -1)
      : Layer("model."), padding_idx_(padding_idx) {
    embed_tokens = register_module("embed_tokens", std::make_shared<WeightTable>(vocab, hidden));
  }
  at::Tensor forward(const at::Tensor& ids, const BatchContext&) override {
    return at::embedding(embed_tokens->weight, ids, padding_idx_);
  }
  int64_t padding_idx() const { return padding_idx_; }  // -1: none
  std::shared_ptr<WeightTable> embed_tokens;

 private:
  int64_t padding_idx_;
};

class NormHeadLayer : public HeadLayer {
 public:
  // With `tied_to`, the head reuses the embedding's weight and has no lm_head parameter.
  NormHeadLayer(int64_t hidden, int64_t vocab, double eps, std::shared_ptr<TokenEmbeddingLayer> tied_to)
      : HeadLayer(""), tied_to_(std::move(tied_to)) {
    model = register_module("model", std::make_shared<Holder>(hidden, eps));
    if (!tied_to_) lm_head = register_module("lm_head", std::make_shared<Linear>(hidden, vocab, false));
  }
  at::Tensor forward(const at::Tensor& hidden, const BatchContext&) override {
    const auto normed = (*model->norm)(hidden);
    return lm_head ? (*lm_head)(normed) : at::linear(normed, tied_to_->embed_tokens->weight);
  }

  // Gives the final norm its HF name, model.norm.weight.
  struct Holder : torch::nn::Module {
    Holder(int64_t hidden, double eps) { norm = register_module("norm", std::make_shared<RMSNorm>(hidden, eps)); }
    std::shared_ptr<RMSNorm> norm;
  };
  std::shared_ptr<Holder> model;
  std::shared_ptr<Linear> lm_head;

 private:
  std::shared_ptr<TokenEmbeddingLayer> tied_to_;
};

}  // namespace superoffload::model
