// The text-splitting stages of a HuggingFace tokenizer.json, before the BPE model: the
// normalizer (none or NFC) and the pre-tokenizer (ByteLevel, Split on a regex or string,
// Digits, or a Sequence of them). Regexes run on PCRE2 in UTF + Unicode-property mode, which
// handles the \p{L}/\p{N} classes and look-aheads of the GPT-2, Llama 3 and Qwen patterns.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace superoffload::data {

class Normalizer {
 public:
  // `spec` is tokenizer.json's "normalizer" (null, {"type": "NFC"}, or a Sequence of NFC).
  // Throws naming `source` for a normalizer this build does not implement.
  Normalizer(const nlohmann::json& spec, const std::string& source);
  std::string apply(std::string_view text) const;
  // Whether apply() would return `text` unchanged.
  bool is_normalized(std::string_view text) const;

 private:
  bool nfc_ = false;
};

// One stage of pre-tokenization: splits each piece into smaller pieces.
class PreTokenizerStage {
 public:
  virtual ~PreTokenizerStage() = default;
  virtual void split(std::string_view piece, std::vector<std::string>& out) const = 0;
};

class PreTokenizer {
 public:
  // `spec` is tokenizer.json's "pre_tokenizer". The last stage must map bytes to the
  // byte-level alphabet (ByteLevel); pieces come out in that alphabet.
  PreTokenizer(const nlohmann::json& spec, const std::string& source);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  std::vector<std::string> apply(std::string_view text) const;

 private:
  std::vector<std::unique_ptr<PreTokenizerStage>> stages_;
};

// GPT-2's byte-to-unicode alphabet: every byte maps to one printable code point, so byte
// strings become vocabulary strings. Returns the UTF-8 of the code point for byte b.
const std::string& byte_to_unicode(unsigned char b);
// The inverse on a vocabulary string; characters outside the alphabet are kept as UTF-8.
std::string unicode_to_bytes(std::string_view text);

}  // namespace superoffload::data
