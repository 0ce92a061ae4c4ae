// Unigram of tokenizer.json (T5-style and many multilingual models): the segmentation of the
// piece into vocabulary pieces with the highest total log-probability (Viterbi), characters no
// piece covers as the unk token scored 10 below the lowest score, runs of them fused into one,
// and with byte_fallback an unknown stretch written as its "<0xXX>" tokens — as HF's
// `tokenizers` (and SentencePiece) segment.
#pragma once

#include <optional>

#include "data/subword_model.hpp"

namespace superoffload::data {

class UnigramModel final : public SubwordModel {
 public:
  UnigramModel(const nlohmann::json& model, const std::string& source);
  void encode(const std::string& piece, std::vector<int32_t>& out) const override;
  std::string kind() const override { return "Unigram"; }

 private:
  std::vector<double> scores_;  // by id
  std::optional<int32_t> unk_;
  double unk_score_ = 0;
  size_t longest_piece_ = 0;  // bytes
  bool byte_fallback_ = false;
};

}  // namespace superoffload::data
