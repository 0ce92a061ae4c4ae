// The model of a HuggingFace tokenizer.json: how one pre-tokenized piece becomes ids. BPE
// (byte-level, or SentencePiece-style with byte_fallback and unk) and Unigram (SentencePiece's
// Viterbi segmentation) implement it; JsonTokenizer runs the pipeline around them.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace superoffload::data {

class SubwordModel {
 public:
  virtual ~SubwordModel() = default;
  // Appends the ids of `piece` (already normalized and pre-tokenized).
  virtual void encode(const std::string& piece, std::vector<int32_t>& out) const = 0;
  virtual std::string kind() const = 0;  // "BPE", "Unigram"
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  // Token strings by id; ids the model does not define are empty.
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }

 protected:
  // Registers a vocabulary entry, refusing negative, huge or shared ids (naming `source`).
  void add_token(const std::string& token, const nlohmann::json& id, const std::string& source);
  // The ids of "<0x00>" ... "<0xFF>" where the vocabulary has them (byte_fallback), else -1.
  void find_byte_tokens();
  // Appends the byte-fallback ids of `text`'s bytes; false (nothing appended) if one is missing.
  bool append_bytes(std::string_view text, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<int32_t> byte_tokens_;
};

// tokenizer.json's "model" ({"type": "BPE" | "Unigram", ...}); throws naming `source` for
// anything else (WordPiece, WordLevel) or a setting that is not supported.
std::unique_ptr<SubwordModel> make_subword_model(const nlohmann::json& model, const std::string& source);

// Token ids are array indices (id → token) and embedding rows: a non-negative integer below a
// bound that keeps the id table allocatable (2^24 is 64 times the largest vocabulary published).
int32_t token_id_value(const nlohmann::json& value, const std::string& source, const std::string& what);

// The bytes of the UTF-8 character that starts with `lead`.
inline size_t utf8_length(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

}  // namespace superoffload::data
