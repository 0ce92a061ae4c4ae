// RegexPattern on PCRE2.
#include "data/regex_pattern.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace superoffload::data {

RegexPattern::RegexPattern(const std::string& pattern, bool literal, const std::string& what, const std::string& source) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_LITERAL admits no UCP (nothing to interpret in a literal anyway).
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &code, &offset, nullptr);
  if (code_ == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(code, message.data(), message.size());
    SO_FAIL(source << ": " << what << ": the pattern does not compile at offset " << offset << ": "
                   << reinterpret_cast<const char*>(message.data()) << " (pattern: " << pattern << ")");
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
}

namespace {
std::pair<std::string, bool> pattern_of(const nlohmann::json& pattern, const std::string& what, const std::string& source) {
  if (pattern.contains("String")) return {pattern.at("String").get<std::string>(), true};
  SO_CHECK(pattern.contains("Regex"), source << ": " << what << ": pattern " << pattern.dump().substr(0, 80)
                                             << " is neither {\"String\": ...} nor {\"Regex\": ...}");
  return {pattern.at("Regex").get<std::string>(), false};
}
}  // namespace

RegexPattern::RegexPattern(const nlohmann::json& pattern, const std::string& what, const std::string& source)
    : RegexPattern(pattern_of(pattern, what, source).first, pattern_of(pattern, what, source).second, what, source) {}

RegexPattern::~RegexPattern() { pcre2_code_free(code_); }

std::vector<std::pair<size_t, size_t>> RegexPattern::matches(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_, nullptr);
  SO_CHECK(data != nullptr, "out of memory for regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t position = 0;
  uint32_t options = 0;
  while (position <= text.size()) {
    const int rc = pcre2_match(code_, subject, text.size(), position, options, data, nullptr);
    options = PCRE2_NO_UTF_CHECK;  // the subject was validated by the first call
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      SO_FAIL("a tokenizer regex failed on the text (PCRE2 error " << rc << ")" << hint("the text must be valid UTF-8"));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {  // step over one character
      position = begin + 1;
      while (position < text.size() && (static_cast<unsigned char>(text[position]) & 0xC0) == 0x80) ++position;
      continue;
    }
    out.emplace_back(begin, end);
    position = end;
  }
  pcre2_match_data_free(data);
  return out;
}

std::string RegexPattern::replace_all(std::string_view text, const std::string& content) const {
  std::string out;
  size_t last = 0;
  for (const auto& [begin, end] : matches(text)) {
    out.append(text.substr(last, begin - last));
    out += content;
    last = end;
  }
  out.append(text.substr(last));
  return out;
}

}  // namespace superoffload::data
