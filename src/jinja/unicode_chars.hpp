// Python's character classes over all of Unicode (ICU): identifiers as jinja2 lexes them
// (`{% set café = 1 %}`), and what str.isspace/isalpha/isdigit/isalnum, strip() and
// splitlines() take a character to be. Chat text comes in every script.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace superoffload::jinja {

// The length in bytes of the identifier that starts at text[pos], or 0 where none does:
// XID_Start or '_' first, then XID_Continue. `text` must be valid UTF-8 (the lexer checks it first).
size_t identifier_length(std::string_view text, size_t pos);

enum class CharClass {
  space,       // str.isspace: bidirectional class WS, B or S, or category Zs
  alpha,       // str.isalpha: categories Lu, Ll, Lt, Lm, Lo
  digit,       // str.isdigit: numeric type decimal or digit
  alnum,       // str.isalnum: a letter or any numeric character
  line_break,  // what str.splitlines splits at: \n \r \v \f \x1c \x1d \x1e \x85 U+2028 U+2029
};
bool char_is(uint32_t code_point, CharClass c);

struct CodePoint {
  uint32_t value;
  size_t begin, end;  // its bytes in the text
};
// The code points of UTF-8 text; a byte that starts no valid sequence counts as one U+FFFD.
std::vector<CodePoint> decode_utf8(std::string_view text);
// The code point that starts at byte `at`, and the one that ends at byte `end` (0 < end).
CodePoint code_point_at(std::string_view text, size_t at);
CodePoint code_point_before(std::string_view text, size_t end);

}  // namespace superoffload::jinja
