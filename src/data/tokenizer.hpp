// The tokenizer contract the data pipeline uses: text to ids, with the special tokens a
// model expects (BOS/EOS around a sequence, the pad and end-of-document ids), and back.
// load_tokenizer() picks the implementation from the files of a HuggingFace directory.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace superoffload::data {

// What a tokenizer adds around a sequence when asked for special tokens (HF's
// add_special_tokens=True), and the ids the data pipeline needs.
struct SpecialTokens {
  std::vector<int32_t> prefix;  // e.g. BOS
  std::vector<int32_t> suffix;  // e.g. EOS for tokenizers that append one
  std::optional<int32_t> bos, eos, pad;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text`, without the prefix/suffix special tokens (HF: add_special_tokens=False).
  // Special tokens written in the text (e.g. "<|im_start|>") are recognised.
  virtual std::vector<int32_t> encode_text(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // The id of a token string, if it is in the vocabulary (for special-token names).
  virtual std::optional<int32_t> token_id(std::string_view token) const = 0;
  virtual std::string kind() const = 0;  // for logs: "byte-level BPE (<path>)", ...

  // encode_text's ids with the byte range [begin, end) of `text` each came from (HF's offset
  // mapping), or nothing where this tokenizer cannot say exactly (a normalizer that changed the
  // text, a pre-tokenizer that added characters, an unknown token): callers then fall back.
  struct Encoding {
    std::vector<int32_t> ids;
    std::vector<std::pair<size_t, size_t>> offsets;
  };
  virtual std::optional<Encoding> encode_text_with_offsets(std::string_view /*text*/) const { return std::nullopt; }

  // encode_text with the special tokens the model adds (HF: add_special_tokens=True).
  std::vector<int32_t> encode(std::string_view text) const;

  const SpecialTokens& special() const { return special_; }
  void set_special(SpecialTokens special) { special_ = std::move(special); }
  // The end-of-document id used to join documents and end responses; throws naming the
  // directory's files when the tokenizer has none.
  int32_t eos_id() const;
  // Padding: the pad token, else EOS (never counted in the loss either way).
  int32_t pad_id() const;

 private:
  SpecialTokens special_;
};

// Loads the tokenizer of a HuggingFace model directory (or a tokenizer file, recognised by its
// content, not its name):
//   tokenizer.json (BPE or Unigram)     -> JsonTokenizer (GPT-2, Llama 3, Qwen 2/3, T5-style, ...)
//   tokenizer.model[.*] (SentencePiece) -> SentencePieceTokenizer (Llama 2, Mistral 7B)
// A directory with both keeps tokenizer.model unless tokenizer.json is byte-level.
// Special tokens come from tokenizer.json's post-processor, tokenizer_config.json
// (bos/eos/pad_token, add_bos_token/add_eos_token) and config.json (bos/eos/pad_token_id).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);
// The directory of a tokenizer path (the path itself, or a tokenizer file's folder): where its
// tokenizer_config.json and chat template are.
std::string tokenizer_directory(const std::string& path);

}  // namespace superoffload::data
