// BPE of tokenizer.json: the piece's characters looked up (unknown ones as byte-fallback
// tokens "<0xXX>" or the unk token, fused when fuse_unk), then merged by rank as HF does.
// Byte-level files (GPT-2, Llama 3, Qwen) and SentencePiece-style ones (Llama 2, Mistral:
// "▁" for spaces, byte_fallback) are the same algorithm over different alphabets.
#pragma once

#include <mutex>
#include <optional>

#include "data/subword_model.hpp"

namespace superoffload::data {

class BpeModel final : public SubwordModel {
 public:
  BpeModel(const nlohmann::json& model, const std::string& source);
  void encode(const std::string& piece, std::vector<int32_t>& out) const override;
  std::string kind() const override { return "BPE"; }

 private:
  // Applies the merges to a piece's symbols in HF's order, in O(n log n).
  void merge_symbols(std::vector<int32_t>& symbols) const;
  void symbols_of(const std::string& piece, std::vector<int32_t>& symbols) const;

  std::string source_;
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  bool ignore_merges_ = false, byte_fallback_ = false, fuse_unk_ = false;
  std::optional<int32_t> unk_;
  // Pieces repeat a lot in natural text; their encodings are cached.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace superoffload::data
