// Template source → tokens: text between tags, and the tokens inside {{ }} and {% %} ({# #}
// comments are dropped). Whitespace control is applied here, as jinja2 does: `-` on a tag
// strips the whitespace beside it; trim_blocks drops the first newline after a block tag;
// lstrip_blocks drops the spaces and tabs before a block tag on its line (`{%+` keeps them).
// {% raw %} ... {% endraw %} becomes text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace superoffload::jinja {

struct Token {
  enum class Kind { text, variable_begin, variable_end, block_begin, block_end, name, string, integer, real, op, end };
  Kind kind;
  std::string text;  // the text, name, string value, number as written, or operator
  int line = 1, column = 1;
};

struct LexOptions {
  bool trim_blocks = false;
  bool lstrip_blocks = false;
};

// Throws TemplateError naming `name`, the line and the column.
std::vector<Token> tokenize(std::string_view source, const std::string& name, const LexOptions& options);

}  // namespace superoffload::jinja
