// Python's identifiers over all of Unicode (jinja2 lexes names with Python's rule: a letter
// or '_' first, then letters, digits, marks and '_'; `{% set café = 1 %}` is a variable).
#pragma once

#include <cstddef>
#include <string_view>

namespace superoffload::jinja {

// The length in bytes of the identifier that starts at text[pos], or 0 where none does.
// `text` must be valid UTF-8 (the lexer checks it first).
size_t identifier_length(std::string_view text, size_t pos);

}  // namespace superoffload::jinja
