// Tokens → statements and expressions, with jinja2's grammar and operator precedence
// (lowest first): `x if c else y`, or, and, not, comparisons and `in`, + -, ~, * / // %, **,
// unary - +, then postfix: .attr, [index], [a:b], (call), | filter, is test.
#pragma once

#include <string>
#include <vector>

#include "jinja/ast.hpp"
#include "jinja/lexer.hpp"

namespace superoffload::jinja {

// Throws TemplateError naming `name`, the line, the column and what was expected.
Body parse(const std::vector<Token>& tokens, const std::string& name);

}  // namespace superoffload::jinja
