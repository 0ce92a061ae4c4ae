// Unicode case mapping with ICU.
#include "jinja/unicode_case.hpp"

#include <unicode/uchar.h>
#include <unicode/unistr.h>

namespace superoffload::jinja {

namespace {

std::string utf8(const icu::UnicodeString& s) {
  std::string out;
  s.toUTF8String(out);
  return out;
}

// Maps each code point with title case where `title_here` says so, lower case elsewhere.
template <class Rule>
std::string by_code_point(const std::string& text, Rule title_here) {
  const auto s = icu::UnicodeString::fromUTF8(text);
  icu::UnicodeString out;
  bool previous_cased = false;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    i += U16_LENGTH(c);
    const bool title = title_here(previous_cased, out.length() == 0);
    icu::UnicodeString one(c);
    if (title) {
      // Full title-case mapping of one character (ß → Ss): its own word, title-cased.
      out += one.toTitle(nullptr);
    } else {
      out += one.toLower();
    }
    previous_cased = u_isalpha(c) != 0;
  }
  return utf8(out);
}

}  // namespace

std::string unicode_upper(const std::string& text) { return utf8(icu::UnicodeString::fromUTF8(text).toUpper()); }
std::string unicode_lower(const std::string& text) { return utf8(icu::UnicodeString::fromUTF8(text).toLower()); }

std::string unicode_capitalize(const std::string& text) {
  return by_code_point(text, [](bool, bool first) { return first; });
}

std::string unicode_title(const std::string& text) {
  return by_code_point(text, [](bool previous_cased, bool) { return !previous_cased; });
}

}  // namespace superoffload::jinja
