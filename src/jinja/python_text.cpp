// Python's repr() and json.dumps text.
#include "jinja/python_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "jinja/template_error.hpp"
#include "jinja/value.hpp"

namespace superoffload::jinja {

std::string python_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The shortest digits that read back: "d.ddde±XX" with the fewest digits.
  char text[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(text, sizeof text, "%.*e", precision - 1, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  std::string mantissa(text, std::strchr(text, 'e'));
  const int exponent = std::atoi(std::strchr(text, 'e') + 1);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += e;
  } else if (exponent < 0) {
    out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    const auto whole = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= whole) {
      out = digits + std::string(whole - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, whole) + "." + digits.substr(whole);
    }
  }
  return (negative ? "-" : "") + out;
}

std::string python_string_repr(const std::string& text) {
  const bool double_quotes = text.find('\'') != std::string::npos && text.find('"') == std::string::npos;
  const char quote = double_quotes ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

namespace {

std::string json_string(const std::string& text, bool ensure_ascii) {
  std::string out = "\"";
  auto escape = [&](unsigned code) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\u%04x", code);
    out += hex;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          escape(c);
        } else if (c < 0x80 || !ensure_ascii) {
          out += static_cast<char>(c);  // ensure_ascii=False: UTF-8 as it is
        } else {  // the code point as \uXXXX, above U+FFFF as a surrogate pair, as json.dumps
          const size_t n = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
          uint32_t code = c & (n == 2 ? 0x1Fu : n == 3 ? 0x0Fu : 0x07u);
          for (size_t k = 1; k < n && i + k < text.size(); ++k) code = (code << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3Fu);
          i += n - 1;
          if (code >= 0x10000) {
            code -= 0x10000;
            escape(0xD800 + (code >> 10));
            escape(0xDC00 + (code & 0x3FF));
          } else {
            escape(code);
          }
        }
    }
  }
  return out + "\"";
}

// A dict key as json.dumps writes it: JSON keys are strings, so numbers, booleans and None are converted.
std::string json_key(const Value& key) {
  if (key.is_string()) return key.as_string();
  if (key.is_bool()) return key.as_bool() ? "true" : "false";
  if (key.is_none()) return "null";
  if (key.is_int()) return std::to_string(key.as_int());
  if (key.is_float()) return python_float(key.as_double());
  throw TemplateError("tojson: keys must be str, int, float, bool or None, not " + key.type_name());
}

void dump(const Value& v, const JsonOptions& o, int level, std::string& out) {
  if (level > 512) throw TemplateError("tojson: the value nests deeper than 512 levels");
  auto repeat = [](const std::string& unit, int times) {
    std::string r;
    for (int k = 0; k < times; ++k) r += unit;
    return r;
  };
  const std::string newline = o.indent ? "\n" + repeat(*o.indent, level + 1) : "";
  const std::string closing = o.indent ? "\n" + repeat(*o.indent, level) : "";
  const std::string separator = o.item_separator.value_or(o.indent ? "," : ", ");
  const std::string key_separator = o.key_separator.value_or(": ");
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    const double d = v.as_double();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : python_float(d);
  } else if (v.is_string()) {
    out += json_string(v.as_string(), o.ensure_ascii);
  } else if (v.is_list()) {
    if (v.as_list().empty()) {
      out += "[]";
      return;
    }
    out += "[";
    for (size_t i = 0; i < v.as_list().size(); ++i) {
      out += (i ? separator : "") + newline;
      dump(v.as_list()[i], o, level + 1, out);
    }
    out += closing + "]";
  } else if (v.is_dict() || v.is_namespace()) {
    Map items = v.is_dict() ? v.as_dict() : Value(v.as_namespace().attributes).as_dict();
    if (items.empty()) {
      out += "{}";
      return;
    }
    // As json.dumps: sorted by the keys themselves (mixed types cannot be), then written as strings.
    if (o.sort_keys) std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return less(a.first, b.first); });
    out += "{";
    for (size_t i = 0; i < items.size(); ++i) {
      out += (i ? separator : "") + newline + json_string(json_key(items[i].first), o.ensure_ascii) + key_separator;
      dump(items[i].second, o, level + 1, out);
    }
    out += closing + "}";
  } else {
    throw TemplateError("tojson: Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string python_json(const Value& value, const JsonOptions& options) {
  std::string out;
  dump(value, options, 0, out);
  return out;
}

}  // namespace superoffload::jinja
