// Character classes from ICU's properties, chosen to agree with CPython's str methods.
#include "jinja/unicode_chars.hpp"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

namespace superoffload::jinja {

size_t identifier_length(std::string_view text, size_t pos) {
  size_t at = pos;
  for (bool first = true; at < text.size(); first = false) {
    const auto byte = static_cast<unsigned char>(text[at]);
    if (byte < 0x80) {  // ASCII, the common case, without ICU
      const bool ok = byte == '_' || (byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') ||
                      (!first && byte >= '0' && byte <= '9');
      if (!ok) break;
      ++at;
      continue;
    }
    int32_t next = static_cast<int32_t>(at);
    UChar32 c;
    U8_NEXT(text.data(), next, static_cast<int32_t>(text.size()), c);
    if (c < 0 || !u_hasBinaryProperty(c, first ? UCHAR_XID_START : UCHAR_XID_CONTINUE)) break;
    at = static_cast<size_t>(next);
  }
  return at - pos;
}

bool char_is(uint32_t code_point, CharClass c) {
  const auto cp = static_cast<UChar32>(code_point);
  switch (c) {
    case CharClass::space: {
      // ASCII first (chat templates strip every message): Python's str.isspace there is
      // \t \n \v \f \r, the separators \x1c-\x1f, and the space.
      if (code_point < 0x80) return code_point == ' ' || (code_point >= 9 && code_point <= 13) || (code_point >= 0x1C && code_point <= 0x1F);
      const auto direction = u_charDirection(cp);
      return direction == U_WHITE_SPACE_NEUTRAL || direction == U_BLOCK_SEPARATOR || direction == U_SEGMENT_SEPARATOR ||
             u_charType(cp) == U_SPACE_SEPARATOR;
    }
    case CharClass::alpha: return u_isalpha(cp) != 0;
    case CharClass::digit: {
      const auto type = u_getIntPropertyValue(cp, UCHAR_NUMERIC_TYPE);
      return type == U_NT_DECIMAL || type == U_NT_DIGIT;
    }
    case CharClass::alnum: return u_isalpha(cp) || u_getIntPropertyValue(cp, UCHAR_NUMERIC_TYPE) != U_NT_NONE;
    case CharClass::line_break:
      return code_point == '\n' || code_point == '\r' || code_point == 0x0B || code_point == 0x0C ||
             (code_point >= 0x1C && code_point <= 0x1E) || code_point == 0x85 || code_point == 0x2028 || code_point == 0x2029;
  }
  return false;
}

std::vector<CodePoint> decode_utf8(std::string_view text) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  for (int32_t i = 0; i < static_cast<int32_t>(text.size());) {
    const int32_t begin = i;
    UChar32 c;
    U8_NEXT(text.data(), i, static_cast<int32_t>(text.size()), c);
    out.push_back({c < 0 ? 0xFFFDu : static_cast<uint32_t>(c), static_cast<size_t>(begin), static_cast<size_t>(i)});
  }
  return out;
}

CodePoint code_point_at(std::string_view text, size_t at) {
  int32_t i = static_cast<int32_t>(at);
  UChar32 c;
  U8_NEXT(text.data(), i, static_cast<int32_t>(text.size()), c);
  return {c < 0 ? 0xFFFDu : static_cast<uint32_t>(c), at, static_cast<size_t>(i)};
}

CodePoint code_point_before(std::string_view text, size_t end) {
  int32_t i = static_cast<int32_t>(end);
  UChar32 c;
  U8_PREV(text.data(), 0, i, c);
  return {c < 0 ? 0xFFFDu : static_cast<uint32_t>(c), static_cast<size_t>(i), end};
}

}  // namespace superoffload::jinja
