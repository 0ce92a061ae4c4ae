// A tokenizer.json pattern ({"String": ...} literal or {"Regex": ...}) compiled by PCRE2 in UTF
// mode (regexes with Unicode properties: \p{L}, \w as Unicode), shared by the normalizer's and
// the decoder's Replace and the pre-tokenizer's Split.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace superoffload::data {

class RegexPattern {
 public:
  // `what` names the use in errors ("normalizer Replace"); `source` the file.
  RegexPattern(const std::string& pattern, bool literal, const std::string& what, const std::string& source);
  // From a tokenizer.json "pattern" object.
  RegexPattern(const nlohmann::json& pattern, const std::string& what, const std::string& source);
  ~RegexPattern();
  RegexPattern(const RegexPattern&) = delete;
  RegexPattern& operator=(const RegexPattern&) = delete;

  // The non-empty matches of `text`, left to right, as [begin, end) byte ranges (an empty
  // match splits and replaces nothing, as in HF).
  std::vector<std::pair<size_t, size_t>> matches(std::string_view text) const;
  // Every match replaced by `content`.
  std::string replace_all(std::string_view text, const std::string& content) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
};

}  // namespace superoffload::data
