// HuggingFace tokenizer.json with a byte-level BPE model (GPT-2, Llama 3, Qwen 2/3,
// Mistral-Nemo style): added/special tokens split out first (leftmost-longest), then the
// normalizer, the pre-tokenizer, and BPE merges by rank within each piece.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/pre_tokenizer.hpp"
#include "data/tokenizer.hpp"

namespace superoffload::data {

class ByteLevelBpe final : public Tokenizer {
 public:
  // `tokenizer` is the parsed tokenizer.json; `source` names the file in errors. The special
  // tokens of its post-processor (TemplateProcessing, RobertaProcessing, ...) become the
  // prefix/suffix of encode().
  ByteLevelBpe(const nlohmann::json& tokenizer, const std::string& source);

  std::vector<int32_t> encode_text(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> token_id(std::string_view token) const override;
  std::string kind() const override { return "byte-level BPE (tokenizer.json)"; }
  std::optional<Encoding> encode_text_with_offsets(std::string_view text) const override;

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool lstrip, rstrip, single_word;
  };
  void encode_piece(const std::string& piece, std::vector<int32_t>& out) const;
  // Applies the merges to a piece's symbols in HF's order, in O(n log n).
  void merge_symbols(std::vector<int32_t>& symbols) const;
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  // Walks `text` as HF splits out added tokens (lstrip/rstrip eat the spaces around them):
  // `plain(begin, end)` for each stretch between them (stops the walk, returning false, when it
  // does), `added_token(token, position)` for each.
  bool split_at_added(std::string_view text, const std::function<bool(size_t, size_t)>& plain,
                      const std::function<void(const AddedToken&, size_t)>& added_token) const;
  // encode_plain of text[begin, end) with offsets into `text`; false where they cannot be exact.
  bool encode_plain_with_offsets(std::string_view text, size_t begin, size_t end, Encoding& out) const;
  // The added token matching at `position` (longest first), or nullptr.
  const AddedToken* added_at(std::string_view text, size_t position) const;

  std::string source_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<uint32_t> token_bytes_;  // the bytes of text each vocabulary token stands for
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  bool ignore_merges_ = false;
  std::optional<int32_t> unk_;
  std::vector<AddedToken> added_;                     // longest first
  std::unordered_map<int32_t, std::string> added_by_id_;
  std::array<bool, 256> added_first_byte_{};          // quick rejection while scanning
  // Pieces repeat a lot in natural text; their encodings are cached.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace superoffload::data
