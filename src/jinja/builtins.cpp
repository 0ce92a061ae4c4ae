// Filters, tests, methods and globals, with Python's and jinja2's semantics.
#include "jinja/builtins.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "jinja/python_text.hpp"
#include "jinja/template_error.hpp"
#include "jinja/unicode_case.hpp"
#include "jinja/unicode_chars.hpp"

namespace superoffload::jinja {

std::vector<std::string> code_points(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    out.push_back(text.substr(i, n));
    i += n;
  }
  return out;
}

namespace {

// The i-th positional argument, else the keyword, else `fallback`.
Value arg(const CallArgs& args, size_t index, const char* keyword, Value fallback = Value()) {
  if (index < args.positional.size()) return args.positional[index];
  for (const auto& [key, value] : args.keyword) {
    if (key == keyword) return value;
  }
  return fallback;
}

std::string text_of(const Value& v) { return v.str(); }

// What a filter or method takes after its input, as jinja2's Python function declares it:
// the parameters in order, how many are required, and whether it takes any (*args, **kwargs).
struct Signature {
  std::vector<const char*> parameters;
  size_t required = 0;
  bool variadic = false;
};

const std::unordered_map<std::string, Signature>& filter_signatures() {
  static const std::unordered_map<std::string, Signature> table = {
      {"abs", {}}, {"capitalize", {}}, {"count", {}}, {"length", {}}, {"e", {}}, {"escape", {}}, {"forceescape", {}},
      {"first", {}}, {"last", {}}, {"list", {}}, {"lower", {}}, {"upper", {}}, {"title", {}}, {"reverse", {}},
      {"safe", {}}, {"string", {}}, {"wordcount", {}}, {"items", {}},
      {"default", {{"default_value", "boolean"}}}, {"d", {{"default_value", "boolean"}}},
      {"dictsort", {{"case_sensitive", "by", "reverse"}}},
      {"float", {{"default"}}},
      {"indent", {{"width", "first", "blank"}}},
      {"int", {{"default", "base"}}},
      {"join", {{"d", "attribute"}}},
      {"map", {{}, 0, true}}, {"select", {{}, 0, true}}, {"reject", {{}, 0, true}},
      {"selectattr", {{}, 0, true}}, {"rejectattr", {{}, 0, true}},
      {"max", {{"case_sensitive", "attribute"}}}, {"min", {{"case_sensitive", "attribute"}}},
      {"replace", {{"old", "new", "count"}, 2}},
      {"round", {{"precision", "method"}}},
      {"sort", {{"reverse", "case_sensitive", "attribute"}}},
      {"sum", {{"attribute", "start"}}},
      {"tojson", {{"ensure_ascii", "indent", "separators", "sort_keys"}}},  // HF's tojson
      {"trim", {{"chars"}}}, {"strip", {{"chars"}}},
      {"unique", {{"case_sensitive", "attribute"}}},
  };
  return table;
}

const std::unordered_map<std::string, Signature>& method_signatures() {
  static const std::unordered_map<std::string, Signature> table = {
      {"str.strip", {{"chars"}}}, {"str.lstrip", {{"chars"}}}, {"str.rstrip", {{"chars"}}},
      {"str.split", {{"sep", "maxsplit"}}}, {"str.rsplit", {{"sep", "maxsplit"}}},
      {"str.startswith", {{"prefix"}, 1}}, {"str.endswith", {{"suffix"}, 1}},
      {"str.upper", {}}, {"str.lower", {}}, {"str.title", {}}, {"str.capitalize", {}},
      {"str.replace", {{"old", "new", "count"}, 2}},
      {"str.find", {{"sub"}, 1}}, {"str.rfind", {{"sub"}, 1}}, {"str.count", {{"sub"}, 1}},
      {"str.join", {{"iterable"}, 1}}, {"str.splitlines", {{"keepends"}}},
      {"str.isdigit", {}}, {"str.isalpha", {}}, {"str.isspace", {}}, {"str.isalnum", {}},
      {"dict.items", {}}, {"dict.keys", {}}, {"dict.values", {}}, {"dict.get", {{"key", "default"}, 1}},
  };
  return table;
}

// Refuses a call that Python would refuse with a TypeError: too many arguments, an unknown or
// repeated keyword, a required one missing.
void check_call(const std::string& name, const Signature& signature, const CallArgs& args) {
  if (signature.variadic) return;
  const auto& p = signature.parameters;
  if (args.positional.size() > p.size()) {
    throw TemplateError(name + "() takes " + (p.empty() ? "no arguments" : "at most " + std::to_string(p.size()) +
                        " argument" + (p.size() == 1 ? "" : "s")) + " (" + std::to_string(args.positional.size()) + " given)");
  }
  for (const auto& [key, value] : args.keyword) {
    const auto at = std::find_if(p.begin(), p.end(), [&](const char* q) { return key == q; });
    if (at == p.end()) throw TemplateError(name + "() got an unexpected keyword argument '" + key + "'");
    if (static_cast<size_t>(at - p.begin()) < args.positional.size()) {
      throw TemplateError(name + "() got multiple values for argument '" + key + "'");
    }
  }
  for (size_t i = args.positional.size(); i < signature.required; ++i) {
    const bool given = std::any_of(args.keyword.begin(), args.keyword.end(), [&](const auto& kv) { return kv.first == p[i]; });
    if (!given) throw TemplateError(name + "() missing required argument '" + std::string(p[i]) + "'");
  }
}

List iterate(const Value& v) {
  if (v.is_list()) return v.as_list();
  if (v.is_dict()) {
    List keys;
    for (const auto& [key, value] : v.as_dict()) keys.emplace_back(key);
    return keys;
  }
  if (v.is_string()) {
    List out;
    for (auto& c : code_points(v.as_string())) out.emplace_back(std::move(c));
    return out;
  }
  if (v.is_undefined()) return {};
  throw TemplateError("'" + v.type_name() + "' object is not iterable");
}

std::string case_lower(const std::string& s) { return unicode_lower(s); }
std::string case_upper(const std::string& s) { return unicode_upper(s); }
std::string capitalize(const std::string& s) { return unicode_capitalize(s); }
std::string title(const std::string& s) { return unicode_title(s); }

// str.strip(chars) over code points: Unicode whitespace by default, else the characters of
// `chars`. Scans inward from both ends only (chat templates trim every message).
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  if (!chars.is_string() && !chars.is_none() && !(chars.is_undefined() && chars.undefined_name().empty())) {
    throw TemplateError("strip arg must be None or str, not " + chars.type_name());
  }
  std::vector<uint32_t> set;
  if (chars.is_string()) {
    for (const auto& c : decode_utf8(chars.as_string())) set.push_back(c.value);
  }
  auto strip_this = [&](uint32_t c) {
    return chars.is_string() ? std::find(set.begin(), set.end(), c) != set.end() : char_is(c, CharClass::space);
  };
  size_t begin = 0, end = s.size();
  while (left && begin < end) {
    const CodePoint c = code_point_at(s, begin);
    if (!strip_this(c.value)) break;
    begin = c.end;
  }
  while (right && end > begin) {
    const CodePoint c = code_point_before(s, end);
    if (!strip_this(c.value)) break;
    end = c.begin;
  }
  return s.substr(begin, end - begin);
}

const std::string& string_argument(const Value& v, const char* what) {
  if (!v.is_string()) throw TemplateError(std::string(what) + " must be str, not " + v.type_name());
  return v.as_string();
}

// An argument Python takes as an integer (a bool is one).
int64_t integer_argument(const Value& v, const char* what) {
  if (v.is_bool()) return v.as_bool();
  if (!v.is_int()) throw TemplateError(std::string(what) + ": '" + v.type_name() + "' object cannot be interpreted as an integer");
  return v.as_int();
}

// The filters that raise jinja2's UndefinedError on an undefined input (they call a method or
// a conversion on it); the others take it as an empty sequence or an empty string.
bool refuses_undefined(const std::string& filter) {
  return filter == "dictsort" || filter == "float" || filter == "int" || filter == "indent" || filter == "abs" ||
         filter == "round" || filter == "tojson";
}

std::string replace(std::string s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) {  // Python inserts `to` between every character
    std::string out = to;
    for (const auto& c : code_points(s)) out += c + to;
    return out;
  }
  size_t at = 0;
  for (int64_t n = 0; (count < 0 || n < count) && (at = s.find(from, at)) != std::string::npos; ++n) {
    s.replace(at, from.size(), to);
    at += to.size();
  }
  return s;
}

// str.split(sep, maxsplit): runs of Unicode whitespace and none at the ends without `sep`.
List split(const std::string& s, const Value& separator, int64_t max_split) {
  List out;
  if (separator.is_none() || separator.is_undefined()) {
    const auto points = decode_utf8(s);
    size_t i = 0;
    int64_t splits = 0;
    while (i < points.size()) {
      while (i < points.size() && char_is(points[i].value, CharClass::space)) ++i;
      if (i >= points.size()) break;
      if (max_split >= 0 && splits == max_split) {
        out.emplace_back(strip(s.substr(points[i].begin), Value(), false, true));
        break;
      }
      size_t j = i;
      while (j < points.size() && !char_is(points[j].value, CharClass::space)) ++j;
      out.emplace_back(s.substr(points[i].begin, points[j - 1].end - points[i].begin));
      ++splits;
      i = j;
    }
    return out;
  }
  const auto& sep = string_argument(separator, "the separator");
  if (sep.empty()) throw TemplateError("split(): empty separator");
  size_t begin = 0;
  for (int64_t n = 0;; ++n) {
    const size_t at = (max_split >= 0 && n >= max_split) ? std::string::npos : s.find(sep, begin);
    if (at == std::string::npos) {
      out.emplace_back(s.substr(begin));
      return out;
    }
    out.emplace_back(s.substr(begin, at - begin));
    begin = at + sep.size();
  }
}

// str.splitlines(keepends) at every line boundary Python knows, "\r\n" as one.
List split_lines(const std::string& s, bool keep_ends) {
  List out;
  const auto points = decode_utf8(s);
  size_t line_begin = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (!char_is(points[i].value, CharClass::line_break)) continue;
    const size_t break_begin = points[i].begin;
    if (points[i].value == '\r' && i + 1 < points.size() && points[i + 1].value == '\n') ++i;
    const size_t end = points[i].end;
    out.emplace_back(s.substr(line_begin, (keep_ends ? end : break_begin) - line_begin));
    line_begin = end;
  }
  if (line_begin < s.size()) out.emplace_back(s.substr(line_begin));
  return out;
}

// str.isspace() and friends: true when there is a character and every one is of the class.
bool all_of_class(const std::string& s, CharClass c) {
  const auto points = decode_utf8(s);
  return !points.empty() && std::all_of(points.begin(), points.end(), [&](const CodePoint& p) { return char_is(p.value, c); });
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start) {
  auto one = [&](const std::string& a) {
    return a.size() <= s.size() && (start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0);
  };
  const std::string what = start ? "startswith" : "endswith";
  if (affix.is_tuple()) {
    bool found = false;
    for (const auto& a : affix.as_list()) {
      if (!a.is_string()) throw TemplateError("tuple for " + what + " must only contain str, not " + a.type_name());
      found = found || one(a.as_string());
    }
    return found;
  }
  if (!affix.is_string()) throw TemplateError(what + " first arg must be str or a tuple of str, not " + affix.type_name());
  return one(affix.as_string());
}

int64_t to_int(const Value& v, int64_t fallback) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  if (v.is_float()) return static_cast<int64_t>(v.as_double());
  if (v.is_string()) {
    try {
      size_t used = 0;
      const auto text = strip(v.as_string(), Value(), true, true);
      const double d = std::stod(text, &used);
      return used == text.size() ? static_cast<int64_t>(d) : fallback;
    } catch (const std::exception&) {
      return fallback;
    }
  }
  return fallback;
}

// float(text) as Python reads it: surrounding whitespace, a sign, digits with single '_'
// between them, a fraction, an exponent, or inf/infinity/nan in any case; nothing else.
std::optional<double> python_float_of(const std::string& raw) {
  const std::string text = strip(raw, Value(), true, true);
  std::string plain;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '_') {
      plain += text[i];
      continue;
    }
    const bool between_digits = i > 0 && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                                std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (!between_digits) return std::nullopt;
  }
  std::string word = plain.substr(plain.empty() || (plain[0] != '+' && plain[0] != '-') ? 0 : 1);
  std::transform(word.begin(), word.end(), word.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const double sign = !plain.empty() && plain[0] == '-' ? -1.0 : 1.0;
  if (word == "inf" || word == "infinity") return sign * HUGE_VAL;
  if (word == "nan") return std::nan("");
  if (word.empty() || word.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;  // no hex, no "0x"
  char* end = nullptr;
  const double d = std::strtod(plain.c_str(), &end);
  if (end != plain.c_str() + plain.size()) return std::nullopt;
  return d;
}

// round(x, n) for a float, as Python does it: to the nearest decimal with n digits of the
// value's exact binary expansion, ties to even (printf's %.*f rounds the exact value).
double python_round(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits >= 0) {
    if (digits > 300) return x;
    std::vector<char> text(static_cast<size_t>(digits) + 400);
    std::snprintf(text.data(), text.size(), "%.*f", static_cast<int>(digits), x);
    return std::strtod(text.data(), nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-digits));
  return std::nearbyint(x / scale) * scale;  // the default rounding mode: ties to even
}

// jinja2's title filter: each word's first character upper case and the rest lower case,
// where words begin after whitespace, '-', '(', '{', '[' or '<' (not after an apostrophe, as
// Python's str.title would).
std::string jinja_title(const std::string& text) {
  std::string out;
  bool word_start = true;
  for (const auto& c : decode_utf8(text)) {
    const std::string one = text.substr(c.begin, c.end - c.begin);
    const bool boundary = char_is(c.value, CharClass::space) || c.value == '-' || c.value == '(' || c.value == '{' ||
                          c.value == '[' || c.value == '<';
    out += boundary ? one : word_start ? case_upper(one) : case_lower(one);
    word_start = boundary;
  }
  return out;
}

// `attribute` may be dotted ("function.name") or an integer index, as jinja2's make_attrgetter.
Value attribute_of(const Value& item, const std::string& attribute) {
  Value v = item;
  size_t begin = 0;
  while (begin <= attribute.size()) {
    const size_t dot = attribute.find('.', begin);
    const std::string part = attribute.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (v.is_list() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      const auto index = static_cast<size_t>(std::stoll(part));
      v = index < v.as_list().size() ? v.as_list()[index] : Value::undefined(part);
    } else {
      v = v.get(part);
    }
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  return v;
}

List select(const Value& input, CallArgs& args, bool by_attribute, bool keep) {
  List out;
  const size_t first_test_arg = by_attribute ? 1 : 0;
  if (by_attribute && args.positional.empty()) throw TemplateError("Missing parameter for attribute name");
  const Value attribute_value = by_attribute ? args.positional[0] : Value(nullptr);
  const auto attribute = text_of(attribute_value);
  const bool has_test = args.positional.size() > first_test_arg;
  const auto test = has_test ? text_of(args.positional[first_test_arg]) : std::string();
  const std::vector<Value> test_args(args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(args.positional.size(), first_test_arg + 1)),
                                     args.positional.end());
  for (const auto& item : iterate(input)) {
    const auto v = by_attribute && !attribute_value.is_none() ? attribute_of(item, attribute) : item;  // attribute none: the item
    const bool passes = has_test ? apply_test(test, v, test_args) : v.truthy();
    if (passes == keep) out.push_back(item);
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// A method bound to its object; `qualified` ("str.strip") names its signature.
Value bound(const std::string& qualified, Function f) {
  const auto& table = method_signatures();
  const auto it = table.find(qualified);
  if (it == table.end()) return Value::function(qualified, std::move(f));
  const Signature signature = it->second;
  return Value::function(qualified, [qualified, signature, f = std::move(f)](CallArgs& args) {
    check_call(qualified, signature, args);
    return f(args);
  });
}

}  // namespace

Value apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  const auto& signatures = filter_signatures();
  if (const auto it = signatures.find(name); it != signatures.end()) check_call(name, it->second, args);
  if (input.is_undefined() && refuses_undefined(name)) throw TemplateError("'" + input.undefined_name() + "' is undefined");
  if (name == "trim" || name == "strip") {
    const Value chars = arg(args, 0, "chars");
    return input.is_string() ? strip(input.as_string(), chars, true, true) : strip(text_of(input), chars, true, true);
  }
  if (name == "tojson") {  // HF's: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    JsonOptions options;
    options.ensure_ascii = arg(args, 0, "ensure_ascii", false).truthy();
    const auto indent = arg(args, 1, "indent", nullptr);
    if (indent.is_int() || indent.is_bool()) {
      options.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.is_bool() ? indent.as_bool() : indent.as_int())), ' ');
    } else if (indent.is_string()) {
      options.indent = indent.as_string();
    } else if (!indent.is_none()) {
      throw TemplateError("tojson: indent must be an integer or a string, not " + indent.type_name());
    }
    const auto separators = arg(args, 2, "separators", nullptr);
    if (!separators.is_none()) {
      if (!separators.is_list() || separators.as_list().size() != 2 || !separators.as_list()[0].is_string() ||
          !separators.as_list()[1].is_string()) {
        throw TemplateError("tojson: separators must be a pair of strings, like (',', ': ')");
      }
      options.item_separator = separators.as_list()[0].as_string();
      options.key_separator = separators.as_list()[1].as_string();
    }
    options.sort_keys = arg(args, 3, "sort_keys", false).truthy();
    return python_json(input, options);
  }
  if (name == "length" || name == "count") {
    if (input.is_string()) {  // code points: the bytes that do not continue a UTF-8 sequence
      const auto& text = input.as_string();
      return static_cast<int64_t>(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
    }
    if (input.is_list()) return static_cast<int64_t>(input.as_list().size());
    if (input.is_dict()) return static_cast<int64_t>(input.as_dict().size());
    if (input.is_undefined()) return int64_t{0};
    throw TemplateError("object of type '" + input.type_name() + "' has no len()");
  }
  if (name == "upper") return case_upper(text_of(input));
  if (name == "lower") return case_lower(text_of(input));
  if (name == "capitalize") return capitalize(text_of(input));
  if (name == "title") return jinja_title(text_of(input));
  if (name == "replace") {
    const auto count = arg(args, 2, "count");
    return replace(text_of(input), text_of(arg(args, 0, "old")), text_of(arg(args, 1, "new")), count.is_int() ? count.as_int() : -1);
  }
  if (name == "join") {
    const auto separator = text_of(arg(args, 0, "d", ""));
    const auto attribute = arg(args, 1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& item : iterate(input)) {
      out += (first ? "" : separator) + text_of(attribute.is_undefined() ? item : attribute_of(item, text_of(attribute)));
      first = false;
    }
    return out;
  }
  if (name == "first" || name == "last") {
    const auto items = iterate(input);
    if (items.empty()) return Value::undefined("first of an empty sequence");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "default" || name == "d") {
    const bool boolean = arg(args, 1, "boolean", false).truthy();
    if (input.is_undefined() || (boolean && !input.truthy())) return arg(args, 0, "default_value", "");
    return input;
  }
  if (name == "items") {
    if (input.is_undefined()) return List{};
    if (!input.is_dict()) throw TemplateError("items: expected a mapping, got '" + input.type_name() + "'");
    List out;
    for (const auto& [key, value] : input.as_dict()) out.push_back(Value::tuple({Value(key), value}));
    return out;
  }
  const bool lazy_sequence_filter = name == "map" || name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr";
  if (lazy_sequence_filter && !input.truthy()) return List{};  // jinja2's `if value:` before it looks at the arguments
  if (name == "selectattr") return select(input, args, true, true);
  if (name == "rejectattr") return select(input, args, true, false);
  if (name == "select") return select(input, args, false, true);
  if (name == "reject") return select(input, args, false, false);
  if (name == "map") {
    List out;
    const auto attribute = arg(args, 99, "attribute");
    if (!attribute.is_undefined()) {
      const auto fallback = arg(args, 99, "default");
      for (const auto& item : iterate(input)) {
        auto v = attribute_of(item, text_of(attribute));
        out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
      }
      return out;
    }
    if (args.positional.empty()) throw TemplateError("map needs a filter name or attribute=");
    const auto filter = text_of(args.positional[0]);
    CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
    for (const auto& item : iterate(input)) out.push_back(apply_filter(filter, item, rest));
    return out;
  }
  if (name == "list") return iterate(input);
  if (name == "string") return text_of(input);
  if (name == "safe" || name == "e" || name == "escape" || name == "forceescape") {
    return name == "safe" ? input : Value(html_escape(text_of(input)));
  }
  if (name == "int") {  // jinja2: int(value), else int(float(value)), else the default as it is
    const auto fallback = arg(args, 0, "default", int64_t{0});
    const auto base = arg(args, 1, "base", int64_t{10});
    if (input.is_int() || input.is_bool()) return to_int(input, 0);
    if (input.is_float()) {
      if (!std::isfinite(input.as_double())) throw TemplateError("cannot convert float " + input.repr() + " to integer");
      return to_int(input, 0);
    }
    if (!input.is_string()) return fallback;
    const auto text = strip(input.as_string(), Value(), true, true);
    int radix = base.is_int() ? static_cast<int>(base.as_int()) : 10;
    if (radix != 0 && (radix < 2 || radix > 36)) throw TemplateError("int() base must be >= 2 and <= 36, or 0");
    // Python's prefixes: 0x, 0o, 0b where the base allows them (base 0 reads them, else decimal).
    std::string digits = text;
    const size_t sign = !digits.empty() && (digits[0] == '+' || digits[0] == '-') ? 1 : 0;
    if (digits.size() > sign + 2 && digits[sign] == '0') {
      const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(digits[sign + 1])));
      const int prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (prefixed && (radix == 0 || radix == prefixed)) {
        digits.erase(sign, 2);
        radix = prefixed;
      }
    }
    if (radix == 0) radix = 10;
    errno = 0;
    char* end = nullptr;
    const long long whole = std::strtoll(digits.c_str(), &end, radix);
    const bool plain_digits = digits.size() > sign && std::isalnum(static_cast<unsigned char>(digits[sign]));
    if (plain_digits && end == digits.c_str() + digits.size() && errno == 0) return static_cast<int64_t>(whole);
    const auto real = python_float_of(text);
    if (real && std::isfinite(*real) && std::fabs(*real) < 9.2e18) return static_cast<int64_t>(*real);
    return fallback;
  }
  if (name == "float") {  // jinja2: float(value), else the default as it is
    if (input.is_number() || input.is_bool()) return input.as_double();
    if (input.is_string()) {
      if (const auto real = python_float_of(input.as_string())) return *real;
    }
    return arg(args, 0, "default", 0.0);
  }
  if (name == "abs") {
    if (input.is_int() || input.is_bool()) return std::abs(to_int(input, 0));
    if (input.is_float()) return std::fabs(input.as_double());
    throw TemplateError("bad operand type for abs(): '" + input.type_name() + "'");
  }
  if (name == "round") {  // jinja2: round(value, precision), or math.ceil/floor at that precision
    const auto precision_value = arg(args, 0, "precision", int64_t{0});
    const auto how = arg(args, 1, "method", "common");
    if (precision_value.is_none() && how.is_string() && how.as_string() == "common" && (input.is_number() || input.is_bool())) {
      // round(x, None) is round(x): an int, ties to even
      return input.is_float() ? Value(static_cast<int64_t>(std::nearbyint(input.as_double()))) : Value(to_int(input, 0));
    }
    if (!how.is_string() || (how.as_string() != "common" && how.as_string() != "ceil" && how.as_string() != "floor")) {
      throw TemplateError("round: method must be common, ceil or floor");
    }
    if (!input.is_number() && !input.is_bool()) throw TemplateError("round: '" + input.type_name() + "' is not a number");
    if (!precision_value.is_int() && !precision_value.is_bool()) {
      throw TemplateError("round: precision must be an integer, not " + precision_value.type_name());
    }
    const int64_t precision = precision_value.is_bool() ? precision_value.as_bool() : precision_value.as_int();
    if (how.as_string() == "common") {
      if (!input.is_float()) return input.is_bool() ? Value(int64_t{input.as_bool()}) : input;  // round(int, n) is the int
      return python_round(input.as_double(), precision);
    }
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = input.as_double() * scale;
    return (how.as_string() == "ceil" ? std::ceil(x) : std::floor(x)) / scale;
  }
  if (name == "reverse") {
    if (input.is_string()) {
      auto points = code_points(input.as_string());
      std::string out;
      for (auto it = points.rbegin(); it != points.rend(); ++it) out += *it;
      return out;
    }
    auto items = iterate(input);
    std::reverse(items.begin(), items.end());
    return items;
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max" || name == "dictsort") {
    const bool dict_sort = name == "dictsort";
    CallArgs none;
    List items = dict_sort ? apply_filter("items", input, none).as_list() : iterate(input);
    const auto by = arg(args, 1, "by", "key");
    if (dict_sort && (!by.is_string() || (by.as_string() != "key" && by.as_string() != "value"))) {
      throw TemplateError("dictsort: you can only sort by either 'key' or 'value'");
    }
    const size_t by_part = dict_sort && by.as_string() == "value" ? 1 : 0;
    const auto attribute = arg(args, dict_sort ? 99 : (name == "sort" ? 2 : 1), "attribute");
    const bool case_sensitive = arg(args, dict_sort ? 0 : (name == "sort" ? 1 : 0), "case_sensitive", false).truthy();
    auto key = [&](const Value& v) {
      Value k = dict_sort ? v.as_list()[by_part] : attribute.is_undefined() ? v : attribute_of(v, text_of(attribute));
      return k.is_string() && !case_sensitive ? Value(case_lower(k.as_string())) : k;
    };
    if (name == "unique") {
      List out;
      std::vector<Value> seen;
      for (const auto& item : items) {
        const auto k = key(item);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) {
          seen.push_back(k);
          out.push_back(item);
        }
      }
      return out;
    }
    // Python's sorted(reverse=True) keeps equal items in their order: the comparison turns, not the result.
    const bool reverse = (name == "sort" && integer_argument(arg(args, 0, "reverse", false), "sort: reverse") != 0) ||
                         (dict_sort && integer_argument(arg(args, 2, "reverse", false), "dictsort: reverse") != 0);
    std::stable_sort(items.begin(), items.end(),
                     [&](const Value& a, const Value& b) { return reverse ? less(key(b), key(a)) : less(key(a), key(b)); });
    if (name == "min") return items.empty() ? Value::undefined("min of an empty sequence") : items.front();
    if (name == "max") return items.empty() ? Value::undefined("max of an empty sequence") : items.back();
    return items;
  }
  if (name == "sum") {  // numbers only: Python's sum of lists is not what a template sums
    const auto attribute = arg(args, 0, "attribute", nullptr);
    Value total = arg(args, 1, "start", int64_t{0});
    for (const auto& item : iterate(input)) {
      const auto v = attribute.is_none() ? item : attribute_of(item, text_of(attribute));
      const bool numbers = (total.is_number() || total.is_bool()) && (v.is_number() || v.is_bool());
      if (!numbers) throw TemplateError("unsupported operand type(s) for +: '" + total.type_name() + "' and '" + v.type_name() + "'");
      const bool integers = !total.is_float() && !v.is_float();
      total = integers ? Value(to_int(total, 0) + to_int(v, 0)) : Value(total.as_double() + v.as_double());
    }
    return total;
  }
  if (name == "indent") {  // jinja2's: lines by str.splitlines, empty ones left bare unless `blank`
    const auto width = arg(args, 0, "width", int64_t{4});
    std::string pad;
    if (width.is_string()) pad = width.as_string();
    else if (width.is_int() || width.is_bool()) pad.assign(static_cast<size_t>(std::max<int64_t>(0, to_int(width, 0))), ' ');
    else throw TemplateError("indent: width must be an integer or a string, not " + width.type_name());
    const bool first = arg(args, 1, "first", false).truthy(), blank = arg(args, 2, "blank", false).truthy();
    if (!input.is_string()) throw TemplateError("indent: the value must be a string, not " + input.type_name());
    const auto lines = split_lines(input.as_string() + "\n", false);
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      const auto& line = lines[i].as_string();
      if (i > 0) out += "\n" + (blank || !line.empty() ? pad : "");
      out += line;
    }
    return first ? pad + out : out;
  }
  if (name == "wordcount") {  // jinja2 counts runs of \w (letters, digits, '_')
    int64_t words = 0;
    bool in_word = false;
    for (const auto& c : decode_utf8(text_of(input))) {
      const bool word = c.value == '_' || char_is(c.value, CharClass::alnum);
      if (word && !in_word) ++words;
      in_word = word;
    }
    return words;
  }
  throw TemplateError("no filter named '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  // jinja2's tests are Python functions: a wrong number of arguments is its TypeError.
  static const std::set<std::string> kBinary = {"divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<",
                                                "gt", "greaterthan", ">", "le", "<=", "ge", ">=", "sameas", "in"};
  const size_t wanted = kBinary.count(name) ? 1 : 0;
  if (args.size() != wanted) {
    throw TemplateError("the test '" + name + "' takes " + (wanted ? "one argument" : "no argument") + ", " +
                        std::to_string(args.size()) + " given");
  }
  auto other = [&]() -> const Value& { return args[0]; };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() || v.is_namespace();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();  // Undefined has len()
  if (name == "number") return v.is_number() || v.is_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_callable() || v.is_undefined();  // jinja2's Undefined defines __call__
  if (name == "lower" || name == "upper") {  // str(value).islower(): a cased character and none of the other case
    const std::string text = text_of(v), lower = case_lower(text), upper = case_upper(text);
    return name == "lower" ? lower == text && upper != text : upper == text && lower != text;
  }
  if (name == "odd" || name == "even") {  // value % 2 == 1 / == 0, for any number
    if (v.is_float()) {
      double r = std::fmod(v.as_double(), 2.0);
      if (r < 0) r += 2.0;
      return name == "odd" ? r == 1.0 : r == 0.0;
    }
    if (!v.is_int() && !v.is_bool()) throw TemplateError("unsupported operand type(s) for %: '" + v.type_name() + "' and 'int'");
    const int64_t n = to_int(v, 0);
    return (((n % 2) + 2) % 2 == 1) == (name == "odd");
  }
  if (name == "divisibleby") {  // Python's value % num == 0
    const Value& num = other();
    if (v.is_string()) {  // str % num is string formatting; its result is a str, never 0
      if (v.as_string().find('%') != std::string::npos) {
        throw TemplateError("printf-style formatting ('%' on a string) is not supported");
      }
      if ((num.is_list() && !num.is_tuple()) || num.is_dict() || num.is_undefined()) return false;
      throw TemplateError("not all arguments converted during string formatting");
    }
    if (!(v.is_number() || v.is_bool()) || !(num.is_number() || num.is_bool())) {
      throw TemplateError("unsupported operand type(s) for %: '" + v.type_name() + "' and '" + num.type_name() + "'");
    }
    if (num.as_double() == 0) throw TemplateError("divisibleby: division by zero");
    if (v.is_float() || num.is_float()) return std::fmod(v.as_double(), num.as_double()) == 0;
    const auto integer = [](const Value& x) { return x.is_bool() ? int64_t{x.as_bool()} : x.as_int(); };
    return integer(v) % integer(num) == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, other());
  if (name == "ne" || name == "!=") return !equal(v, other());
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, other());
  if (name == "gt" || name == "greaterthan" || name == ">") return less(other(), v);
  if (name == "le" || name == "<=") return !less(other(), v);
  if (name == "ge" || name == ">=") return !less(v, other());
  if (name == "sameas") {  // Python's `is`: identity, which only none, booleans and small ints share by value
    const auto& o = other();
    if (v.is_none() || o.is_none()) return v.is_none() && o.is_none();
    if (v.is_bool() || o.is_bool()) return v.is_bool() && o.is_bool() && v.as_bool() == o.as_bool();
    if (v.is_int() && o.is_int()) return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;  // CPython's cache
    return false;
  }
  if (name == "in") {
    const auto& container = other();
    if (container.is_string()) {
      if (!v.is_string()) throw TemplateError("'in <string>' requires string as left operand, not " + v.type_name());
      return container.as_string().find(v.as_string()) != std::string::npos;
    }
    if (container.is_dict() && ((v.is_list() && !v.is_tuple()) || v.is_dict())) {
      throw TemplateError("unhashable type: '" + v.type_name() + "'");
    }
    if (container.is_dict()) return find(container.as_dict(), v) != nullptr;
    for (const auto& item : iterate(container)) {
      if (equal(item, v)) return true;
    }
    return false;
  }
  throw TemplateError("no test named '" + name + "'");
}

bool is_dict_method(const std::string& name) {
  static const std::set<std::string, std::less<>> names{"items", "keys",  "values", "get",    "update",
                                                        "pop",   "setdefault", "clear", "popitem"};
  return names.count(name) > 0;
}

Value method(const Value& object, const std::string& name) {
  if (object.is_string()) {
    const std::string s = object.as_string();
    const std::string qualified = "str." + name;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return bound(qualified, [s, name](CallArgs& a) {
        return Value(strip(s, arg(a, 0, "chars"), name != "rstrip", name != "lstrip"));
      });
    }
    if (name == "split" || name == "rsplit") {
      return bound(qualified, [s, name](CallArgs& a) {
        const auto max_split = arg(a, 1, "maxsplit", int64_t{-1});
        if (!max_split.is_int() && !max_split.is_bool()) throw TemplateError("maxsplit must be an integer, not " + max_split.type_name());
        const int64_t limit = max_split.is_bool() ? max_split.as_bool() : max_split.as_int();
        if (name == "split" || limit < 0) return Value(split(s, arg(a, 0, "sep"), limit));
        // rsplit with a limit: split the reversed text, as the splits count from the right.
        auto reversed = [](const std::string& text) {
          std::string out;
          const auto points = decode_utf8(text);
          for (auto it = points.rbegin(); it != points.rend(); ++it) out += text.substr(it->begin, it->end - it->begin);
          return out;
        };
        const auto sep = arg(a, 0, "sep");
        List parts = split(reversed(s), sep.is_string() ? Value(reversed(sep.as_string())) : sep, limit);
        std::reverse(parts.begin(), parts.end());
        for (auto& part : parts) part = Value(reversed(part.as_string()));
        return Value(parts);
      });
    }
    if (name == "startswith" || name == "endswith") {
      return bound(qualified, [s, name](CallArgs& a) {
        return Value(starts_or_ends(s, arg(a, 0, name == "startswith" ? "prefix" : "suffix"), name == "startswith"));
      });
    }
    if (name == "upper") return bound(qualified, [s](CallArgs&) { return Value(case_upper(s)); });
    if (name == "lower") return bound(qualified, [s](CallArgs&) { return Value(case_lower(s)); });
    if (name == "title") return bound(qualified, [s](CallArgs&) { return Value(title(s)); });
    if (name == "capitalize") return bound(qualified, [s](CallArgs&) { return Value(capitalize(s)); });
    if (name == "replace") {
      return bound(qualified, [s](CallArgs& a) {
        const auto count = arg(a, 2, "count", int64_t{-1});
        if (!count.is_int()) throw TemplateError("replace: count must be an integer, not " + count.type_name());
        return Value(replace(s, string_argument(arg(a, 0, "old"), "replace: old"), string_argument(arg(a, 1, "new"), "replace: new"),
                             count.as_int()));
      });
    }
    if (name == "find" || name == "rfind" || name == "count") {
      return bound(qualified, [s, name](CallArgs& a) {
        const std::string needle = string_argument(arg(a, 0, "sub"), name.c_str());
        const auto length = static_cast<int64_t>(decode_utf8(s).size());
        if (needle.empty()) return Value(name == "count" ? length + 1 : name == "find" ? int64_t{0} : length);
        if (name == "count") {
          int64_t n = 0;
          for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + needle.size())) ++n;
          return Value(n);
        }
        const auto at = name == "find" ? s.find(needle) : s.rfind(needle);
        return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(decode_utf8(s.substr(0, at)).size()));
      });
    }
    if (name == "join") {
      return bound(qualified, [s](CallArgs& a) {
        std::string out;
        bool first = true;
        for (const auto& item : iterate(arg(a, 0, "iterable"))) {
          if (!item.is_string()) throw TemplateError("join: expected str instance, '" + item.type_name() + "' found");
          out += (first ? "" : s) + item.as_string();
          first = false;
        }
        return Value(out);
      });
    }
    if (name == "splitlines") {
      return bound(qualified, [s](CallArgs& a) { return Value(split_lines(s, integer_argument(arg(a, 0, "keepends", false), "keepends") != 0)); });
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
      const CharClass c = name == "isdigit" ? CharClass::digit : name == "isalpha" ? CharClass::alpha
                        : name == "isspace" ? CharClass::space : CharClass::alnum;
      return bound(qualified, [s, c](CallArgs&) { return Value(all_of_class(s, c)); });
    }
    return Value::undefined(name);
  }
  if (object.is_dict()) {
    if (!is_dict_method(name)) return Value::undefined(name);
    const Value dict = object;
    if (name == "items") return bound("dict." + name, [dict](CallArgs& a) { return apply_filter("items", dict, a); });
    if (name == "keys") return bound("dict." + name, [dict](CallArgs&) { return Value(iterate(dict)); });
    if (name == "values") {
      return bound("dict." + name, [dict](CallArgs&) {
        List out;
        for (const auto& [key, value] : dict.as_dict()) out.push_back(value);
        return Value(out);
      });
    }
    if (name == "get") {
      return bound("dict." + name, [dict](CallArgs& a) {
        const auto key = arg(a, 0, "key");
        if ((key.is_list() && !key.is_tuple()) || key.is_dict()) throw TemplateError("unhashable type: '" + key.type_name() + "'");
        const auto v = dict.item(key);
        return v.is_undefined() ? arg(a, 1, "default", nullptr) : v;
      });
    }
    if (name == "update" || name == "pop" || name == "setdefault" || name == "clear" || name == "popitem") {
      throw TemplateError("access to attribute '" + name + "' of 'dict' object is unsafe (the sandbox is immutable)");
    }
    return Value::undefined(name);
  }
  if (object.is_list()) {
    const Value list = object;
    if (name == "count") {
      return Value::function("list.count", [list](CallArgs& a) {
        if (a.positional.size() != 1 || !a.keyword.empty()) throw TemplateError("list.count() takes exactly one argument");
        return Value(static_cast<int64_t>(std::count_if(list.as_list().begin(), list.as_list().end(),
                                                        [&](const Value& x) { return equal(x, a.positional[0]); })));
      });
    }
    if (name == "index") {
      return Value::function("list.index", [list](CallArgs& a) {
        if (a.positional.size() != 1 || !a.keyword.empty()) throw TemplateError("list.index() takes exactly one argument");
        const auto& items = list.as_list();
        const auto at = std::find_if(items.begin(), items.end(), [&](const Value& x) { return equal(x, a.positional[0]); });
        if (at == items.end()) throw TemplateError(a.positional[0].repr() + " is not in list");
        return Value(static_cast<int64_t>(at - items.begin()));
      });
    }
    if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" || name == "clear" ||
        name == "sort" || name == "reverse") {
      throw TemplateError("access to attribute '" + name + "' of 'list' object is unsafe (the sandbox is immutable)");
    }
  }
  return Value::undefined(name);
}

Dict globals() {
  Dict g;
  g.emplace_back("range", Value::function("range", [](CallArgs& a) {
    if (a.positional.empty() || a.positional.size() > 3) throw TemplateError("range expected 1 to 3 arguments");
    for (const auto& v : a.positional) {
      if (!v.is_int()) throw TemplateError("range: '" + v.type_name() + "' object cannot be interpreted as an integer");
    }
    const int64_t start = a.positional.size() > 1 ? a.positional[0].as_int() : 0;
    const int64_t stop = a.positional.size() > 1 ? a.positional[1].as_int() : a.positional[0].as_int();
    const int64_t step = a.positional.size() > 2 ? a.positional[2].as_int() : 1;
    if (step == 0) throw TemplateError("range() arg 3 must not be zero");
    constexpr int64_t kMaxRange = 100'000;  // jinja2's sandbox refuses larger ranges (MAX_RANGE)
    const int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                                   : (start > stop ? (start - stop - step - 1) / -step : 0);
    if (count > kMaxRange) throw TemplateError("range too big: " + std::to_string(count) + " items (at most 100000)");
    List out;
    for (int64_t i = 0; i < count; ++i) out.emplace_back(start + i * step);
    return Value(out);
  }));
  g.emplace_back("namespace", Value::function("namespace", [](CallArgs& a) {
    auto ns = std::make_shared<Namespace>();
    for (const auto& v : a.positional) {
      if (!v.is_dict()) throw TemplateError("namespace() takes a mapping or keyword arguments");
      for (const auto& [key, value] : v.as_dict()) {
        if (key.is_string()) ns->attributes.emplace_back(key.as_string(), value);  // others no attribute reaches
      }
    }
    for (const auto& kv : a.keyword) ns->attributes.push_back(kv);
    return Value(ns);
  }));
  g.emplace_back("dict", Value::function("dict", [](CallArgs& a) {
    Map d;
    for (const auto& v : a.positional) {
      if (!v.is_dict()) throw TemplateError("dict() takes a mapping or keyword arguments, not '" + v.type_name() + "'");
      for (const auto& [key, value] : v.as_dict()) insert(d, key, value);
    }
    for (const auto& [key, value] : a.keyword) insert(d, Value(key), value);
    return Value(std::move(d));
  }));
  g.emplace_back("raise_exception", Value::function("raise_exception", [](CallArgs& a) -> Value {
    throw RaisedException(a.positional.empty() ? std::string("raise_exception()") : text_of(a.positional[0]));
  }));
  g.emplace_back("strftime_now", Value::function("strftime_now", [](CallArgs& a) {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char text[256];
    const auto n = std::strftime(text, sizeof text, text_of(arg(a, 0, "format")).c_str(), &local);
    return Value(std::string(text, n));
  }));
  return g;
}

}  // namespace superoffload::jinja
