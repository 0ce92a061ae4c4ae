// A HuggingFace tokenizer.json run as HF `tokenizers` runs it: added tokens split out of the
// text (those with normalized = false first, then the rest in the normalized text; lstrip,
// rstrip and single_word as HF applies them), the normalizer, the pre-tokenizer, the model
// (BPE or Unigram) per piece, the post-processor's special tokens, and the decoder. Covers
// byte-level BPE (GPT-2, Llama 3, Qwen, Mistral Tekken), SentencePiece-style BPE with byte
// fallback (Llama 2, Mistral 7B without tokenizer.model) and Unigram files.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/normalizer.hpp"
#include "data/pre_tokenizer.hpp"
#include "data/subword_model.hpp"
#include "data/token_decoder.hpp"
#include "data/tokenizer.hpp"

namespace superoffload::data {

class JsonTokenizer final : public Tokenizer {
 public:
  // `tokenizer` is the parsed tokenizer.json; `source` names the file in errors and in kind().
  // The special tokens of its post-processor (TemplateProcessing, RobertaProcessing, ...)
  // become the prefix/suffix of encode().
  JsonTokenizer(const nlohmann::json& tokenizer, const std::string& source);

  std::vector<int32_t> encode_text(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> token_id(std::string_view token) const override;
  std::string kind() const override;
  // Exact offsets for byte-level files whose normalizer leaves the text as it is; else nothing.
  std::optional<Encoding> encode_text_with_offsets(std::string_view text) const override;

  struct AddedToken {
    std::string content;  // as matched: normalized for normalized tokens
    int32_t id;
    bool lstrip, rstrip, single_word;
  };
  // The added tokens matched at one stage (raw text or normalized text), longest first.
  struct AddedTokens {
    std::vector<AddedToken> tokens;
    std::array<bool, 256> first_byte{};  // quick rejection while scanning
    const AddedToken* at(std::string_view text, size_t position) const;
    // Walks `text` as HF splits out added tokens (lstrip/rstrip eat the spaces around them):
    // `plain(begin, end)` for each stretch between them (stops the walk, returning false, when
    // it does), `added_token(token, position)` for each.
    bool split(std::string_view text, const std::function<bool(size_t, size_t)>& plain,
               const std::function<void(const AddedToken&, size_t)>& added_token) const;
  };

 private:
  // The ids of a stretch of text between raw-matched added tokens; `at_start`: it begins the text.
  void encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  // encode_plain of text[begin, end) with offsets into `text`; false where they cannot be exact.
  bool encode_plain_with_offsets(std::string_view text, size_t begin, size_t end, Encoding& out) const;

  std::string source_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::unique_ptr<SubwordModel> model_;
  TokenDecoder decoder_;
  AddedTokens raw_added_, normalized_added_;
  // An added token's string as HF decodes it (a normalized token's normalized content), and its
  // id by the name it was added with (for bos_token and the like).
  std::unordered_map<int32_t, std::string> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_name_;
  std::vector<uint32_t> token_bytes_;  // byte-level files: the bytes of text each token stands for
  int64_t vocab_size_ = 0;
};

}  // namespace superoffload::data
