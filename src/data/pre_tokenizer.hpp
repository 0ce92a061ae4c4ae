// The pre-tokenizer of a HuggingFace tokenizer.json: how the normalized text is cut into the
// pieces the model encodes one by one (ByteLevel, Split on a regex or string, Digits,
// Metaspace, Whitespace, WhitespaceSplit, Punctuation, or a Sequence of them). Regexes run on
// PCRE2 in UTF + Unicode-property mode, which handles the \p{L}/\p{N} classes and
// look-aheads of the GPT-2, Llama 3 and Qwen patterns.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace superoffload::data {

// One stage of pre-tokenization: splits each piece into smaller pieces.
class PreTokenizerStage {
 public:
  virtual ~PreTokenizerStage() = default;
  // `at_start`: the piece begins the text (not after an added token), which Metaspace's
  // prepend_scheme "first" asks.
  virtual void split(std::string_view piece, bool at_start, std::vector<std::string>& out) const = 0;
};

class PreTokenizer {
 public:
  // `spec` is tokenizer.json's "pre_tokenizer" (null: the text is one piece). ByteLevel, if
  // there, must be the last stage; pieces then come out in the byte-level alphabet.
  PreTokenizer(const nlohmann::json& spec, const std::string& source);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  // `at_start`: `text` begins the whole text (no added token before it).
  std::vector<std::string> apply(std::string_view text, bool at_start = true) const;
  bool byte_level() const { return byte_level_; }

 private:
  std::vector<std::unique_ptr<PreTokenizerStage>> stages_;
  bool byte_level_ = false;
};

// GPT-2's byte-to-unicode alphabet: every byte maps to one printable code point, so byte
// strings become vocabulary strings. Returns the UTF-8 of the code point for byte b.
const std::string& byte_to_unicode(unsigned char b);
// Appends the bytes `token` stands for if every character of it is in the alphabet (HF's
// ByteLevel decoder, token by token); returns false, appending nothing, otherwise.
bool append_alphabet_bytes(std::string_view token, std::string& out);

}  // namespace superoffload::data
