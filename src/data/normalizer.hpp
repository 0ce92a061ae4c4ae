// The normalizer of a HuggingFace tokenizer.json: what HF `tokenizers` does to a text before
// pre-tokenization. Unicode forms (NFC, NFD, NFKC, NFKD) and Lowercase run on ICU; Strip,
// Replace (a string or a PCRE2 regex) and Prepend as HF defines them; a Sequence in order.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace superoffload::data {

class Normalizer {
 public:
  // `spec` is tokenizer.json's "normalizer" (null for none). Throws naming `source`, the key
  // and what is supported for a normalizer this build does not implement.
  Normalizer(const nlohmann::json& spec, const std::string& source);
  ~Normalizer();
  Normalizer(Normalizer&&) noexcept;
  std::string apply(std::string_view text) const;
  // Whether apply() returns `text` unchanged (then byte offsets into it stay exact).
  bool is_normalized(std::string_view text) const;
  bool empty() const { return steps_.empty(); }

  class Step {
   public:
    virtual ~Step() = default;
    virtual std::string apply(std::string text) const = 0;
  };

 private:
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace superoffload::data
