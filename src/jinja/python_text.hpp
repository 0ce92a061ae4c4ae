// Text as Python writes it, where a chat template's output depends on it: repr() of floats and
// strings, and json.dumps (HF's `tojson`: ensure_ascii=False, optional indent).
#pragma once

#include <optional>
#include <string>

namespace superoffload::jinja {

class Value;

// repr(float): the shortest digits that read back, fixed between 1e-4 and 1e16, else
// exponent ("1e-05", "1e+16"); "inf", "nan"; a whole number keeps ".0".
std::string python_float(double value);
// repr(str): single quotes unless the text holds ' and no ".
std::string python_string_repr(const std::string& text);
// json.dumps's arguments, as HF's tojson passes them.
struct JsonOptions {
  bool ensure_ascii = false;          // non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
  std::optional<std::string> indent;  // a newline and this per level; none: one line
  std::optional<std::string> item_separator, key_separator;  // default ", " (",' with indent) and ": "
  bool sort_keys = false;
};
// json.dumps(value, ...). Throws for values JSON cannot hold.
std::string python_json(const Value& value, const JsonOptions& options = {});

}  // namespace superoffload::jinja
