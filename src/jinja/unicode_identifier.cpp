// identifier_length: ICU's XID_Start and XID_Continue, the properties Python's identifiers use.
#include "jinja/unicode_identifier.hpp"

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

}  // namespace superoffload::jinja
