// SentencePiece .model files (Llama 2, Mistral 7B) through libsentencepiece, the library
// HF's slow tokenizers wrap. Control tokens written in the text ("<s>", "</s>") are split
// out first and emitted as their ids, as HF does for special tokens.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.hpp"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace superoffload::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode_text(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> token_id(std::string_view token) const override;
  std::string kind() const override { return "SentencePiece (" + path_ + ")"; }

  // The model's own special ids (-1 where the model has none).
  int32_t model_bos() const;
  int32_t model_eos() const;
  int32_t model_pad() const;

 private:
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::vector<std::pair<std::string, int32_t>> control_;  // longest first
};

}  // namespace superoffload::data
