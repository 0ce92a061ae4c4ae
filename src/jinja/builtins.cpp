// Filters, tests, methods and globals, with Python's and jinja2's semantics.
#include "jinja/builtins.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <map>
#include <optional>
#include <set>

#include "jinja/python_text.hpp"
#include "jinja/template_error.hpp"
#include "jinja/unicode_case.hpp"

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

bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto strip_this = [&](unsigned char c) {
    return chars.is_string() ? chars.as_string().find(static_cast<char>(c)) != std::string::npos : is_space(c);
  };
  size_t begin = 0, end = s.size();
  while (left && begin < end && strip_this(static_cast<unsigned char>(s[begin]))) ++begin;
  while (right && end > begin && strip_this(static_cast<unsigned char>(s[end - 1]))) --end;
  return s.substr(begin, end - begin);
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

List split(const std::string& s, const Value& separator, int64_t max_split) {
  List out;
  if (!separator.is_string()) {  // runs of whitespace, none at the ends
    size_t i = 0;
    int64_t splits = 0;
    while (i < s.size()) {
      while (i < s.size() && is_space(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      if (max_split >= 0 && splits == max_split) {
        out.emplace_back(strip(s.substr(i), Value(), false, true));
        break;
      }
      size_t j = i;
      while (j < s.size() && !is_space(static_cast<unsigned char>(s[j]))) ++j;
      out.emplace_back(s.substr(i, j - i));
      ++splits;
      i = j;
    }
    return out;
  }
  const auto& sep = separator.as_string();
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

bool starts_or_ends(const std::string& s, const Value& affix, bool start) {
  auto one = [&](const std::string& a) {
    return a.size() <= s.size() && (start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0);
  };
  if (affix.is_list()) {
    for (const auto& a : affix.as_list()) {
      if (a.is_string() && one(a.as_string())) return true;
    }
    return false;
  }
  if (!affix.is_string()) throw TemplateError(std::string(start ? "startswith" : "endswith") + " takes a string or a tuple of strings");
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
  const auto attribute = by_attribute ? text_of(arg(args, 0, "attribute")) : std::string();
  const bool has_test = args.positional.size() > first_test_arg;
  const auto test = has_test ? text_of(args.positional[first_test_arg]) : std::string();
  const std::vector<Value> test_args(args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(args.positional.size(), first_test_arg + 1)),
                                     args.positional.end());
  for (const auto& item : iterate(input)) {
    const auto v = by_attribute ? attribute_of(item, attribute) : item;
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

Value bound(const std::string& name, Function f) { return Value::function(name, std::move(f)); }

}  // namespace

Value apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  if (name == "trim" || name == "strip") return strip(text_of(input), arg(args, 0, "chars"), true, true);
  if (name == "tojson") {
    const auto indent = arg(args, 0, "indent");
    return python_json(input, indent.is_int() ? std::optional<int>(static_cast<int>(indent.as_int())) : std::nullopt,
                       arg(args, 99, "sort_keys", false).truthy());
  }
  if (name == "length" || name == "count") {
    if (input.is_string()) return static_cast<int64_t>(code_points(input.as_string()).size());
    if (input.is_list()) return static_cast<int64_t>(input.as_list().size());
    if (input.is_dict()) return static_cast<int64_t>(input.as_dict().size());
    if (input.is_undefined()) return int64_t{0};
    throw TemplateError("object of type '" + input.type_name() + "' has no len()");
  }
  if (name == "upper") return case_upper(text_of(input));
  if (name == "lower") return case_lower(text_of(input));
  if (name == "capitalize") return capitalize(text_of(input));
  if (name == "title") return title(text_of(input));
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
  if (name == "int") return to_int(input, arg(args, 0, "default", int64_t{0}).is_int() ? arg(args, 0, "default", int64_t{0}).as_int() : 0);
  if (name == "float") {
    if (input.is_number() || input.is_bool()) return input.as_double();
    try {
      return std::stod(text_of(input));
    } catch (const std::exception&) {
      return arg(args, 0, "default", 0.0);
    }
  }
  if (name == "abs") {
    if (input.is_int()) return std::abs(input.as_int());
    if (input.is_float()) return std::fabs(input.as_double());
    throw TemplateError("bad operand type for abs(): '" + input.type_name() + "'");
  }
  if (name == "round") {
    const auto precision = arg(args, 0, "precision", int64_t{0}).as_int();
    const auto how = text_of(arg(args, 1, "method", "common"));
    const double scale = std::pow(10.0, static_cast<double>(precision)), x = input.as_double() * scale;
    const double r = how == "ceil" ? std::ceil(x) : how == "floor" ? std::floor(x) : std::round(x);
    return r / scale;
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
    List items = dict_sort ? apply_filter("items", input, args).as_list() : iterate(input);
    const auto attribute = arg(args, dict_sort ? 99 : (name == "sort" ? 2 : 1), "attribute");
    const bool case_sensitive = arg(args, dict_sort ? 0 : (name == "sort" ? 1 : 0), "case_sensitive", false).truthy();
    auto key = [&](const Value& v) {
      Value k = dict_sort ? v.as_list()[0] : attribute.is_undefined() ? v : attribute_of(v, text_of(attribute));
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
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) { return less(key(a), key(b)); });
    if (name == "min") return items.empty() ? Value::undefined("min of an empty sequence") : items.front();
    if (name == "max") return items.empty() ? Value::undefined("max of an empty sequence") : items.back();
    if (arg(args, 0, "reverse", false).truthy() && name == "sort") std::reverse(items.begin(), items.end());
    return items;
  }
  if (name == "sum") {
    const auto attribute = arg(args, 0, "attribute");
    Value total = arg(args, 1, "start", int64_t{0});
    for (const auto& item : iterate(input)) {
      const auto v = attribute.is_undefined() ? item : attribute_of(item, text_of(attribute));
      total = total.is_int() && v.is_int() ? Value(total.as_int() + v.as_int()) : Value(total.as_double() + v.as_double());
    }
    return total;
  }
  if (name == "indent") {
    const auto width = arg(args, 0, "width", int64_t{4});
    const std::string pad = width.is_string() ? width.as_string() : std::string(static_cast<size_t>(width.as_int()), ' ');
    const bool first = arg(args, 1, "first", false).truthy(), blank = arg(args, 2, "blank", false).truthy();
    const auto lines = split(text_of(input), Value("\n"), -1);
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      const auto& line = lines[i].as_string();
      if (i > 0) out += "\n";
      if ((i > 0 || first) && (blank || !strip(line, Value(), true, true).empty())) out += pad;
      out += line;
    }
    return out;
  }
  if (name == "wordcount") return static_cast<int64_t>(split(text_of(input), Value(), -1).size());
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
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "number") return v.is_number() || v.is_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && case_lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && case_upper(v.as_string()) == v.as_string();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) throw TemplateError("the test '" + name + "' needs an integer, got '" + v.type_name() + "'");
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {  // Python's value % num == 0
    const Value& num = other();
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
  if (name == "sameas") {
    const auto& o = other();
    if (v.is_none() || o.is_none()) return v.is_none() && o.is_none();
    if (v.is_bool() || o.is_bool()) return v.is_bool() && o.is_bool() && v.as_bool() == o.as_bool();
    return equal(v, o) && v.type_name() == o.type_name();
  }
  if (name == "in") {
    const auto& container = other();
    if (container.is_string()) return v.is_string() && container.as_string().find(v.as_string()) != std::string::npos;
    for (const auto& item : iterate(container)) {
      if (equal(item, v)) return true;
    }
    return false;
  }
  throw TemplateError("no test named '" + name + "'");
}

Value method(const Value& object, const std::string& name) {
  if (object.is_string()) {
    const std::string s = object.as_string();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return bound(name, [s, name](CallArgs& a) {
        return Value(strip(s, arg(a, 0, "chars"), name != "rstrip", name != "lstrip"));
      });
    }
    if (name == "split" || name == "rsplit") {
      return bound(name, [s](CallArgs& a) {
        const auto max_split = arg(a, 1, "maxsplit", int64_t{-1});
        return Value(split(s, arg(a, 0, "sep"), max_split.is_int() ? max_split.as_int() : -1));
      });
    }
    if (name == "startswith" || name == "endswith") {
      return bound(name, [s, name](CallArgs& a) { return Value(starts_or_ends(s, arg(a, 0, "prefix"), name == "startswith")); });
    }
    if (name == "upper") return bound(name, [s](CallArgs&) { return Value(case_upper(s)); });
    if (name == "lower") return bound(name, [s](CallArgs&) { return Value(case_lower(s)); });
    if (name == "title") return bound(name, [s](CallArgs&) { return Value(title(s)); });
    if (name == "capitalize") return bound(name, [s](CallArgs&) { return Value(capitalize(s)); });
    if (name == "replace") {
      return bound(name, [s](CallArgs& a) {
        const auto count = arg(a, 2, "count");
        return Value(replace(s, text_of(arg(a, 0, "old")), text_of(arg(a, 1, "new")), count.is_int() ? count.as_int() : -1));
      });
    }
    if (name == "find" || name == "rfind" || name == "count") {
      return bound(name, [s, name](CallArgs& a) {
        const auto needle = text_of(arg(a, 0, "sub"));
        if (name == "count") {
          int64_t n = 0;
          for (size_t at = s.find(needle); !needle.empty() && at != std::string::npos; at = s.find(needle, at + needle.size())) ++n;
          return Value(n);
        }
        const auto at = name == "find" ? s.find(needle) : s.rfind(needle);
        return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(code_points(s.substr(0, at)).size()));
      });
    }
    if (name == "join") {
      return bound(name, [s](CallArgs& a) {
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
      return bound(name, [s](CallArgs&) {
        auto lines = split(s, Value("\n"), -1);
        if (!lines.empty() && lines.back().as_string().empty()) lines.pop_back();
        return Value(lines);
      });
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
      return bound(name, [s, name](CallArgs&) {
        if (s.empty()) return Value(false);
        return Value(std::all_of(s.begin(), s.end(), [&](unsigned char c) {
          return name == "isdigit" ? std::isdigit(c) != 0 : name == "isalpha" ? std::isalpha(c) != 0
                                                         : name == "isspace" ? is_space(c) : std::isalnum(c) != 0;
        }));
      });
    }
    return Value::undefined(name);
  }
  if (object.is_dict()) {
    const Value dict = object;
    if (name == "items") return bound(name, [dict](CallArgs& a) { return apply_filter("items", dict, a); });
    if (name == "keys") return bound(name, [dict](CallArgs&) { return Value(iterate(dict)); });
    if (name == "values") {
      return bound(name, [dict](CallArgs&) {
        List out;
        for (const auto& [key, value] : dict.as_dict()) out.push_back(value);
        return Value(out);
      });
    }
    if (name == "get") {
      return bound(name, [dict](CallArgs& a) {
        const auto v = dict.item(arg(a, 0, "key"));
        return v.is_undefined() ? arg(a, 1, "default", nullptr) : v;
      });
    }
    if (name == "update" || name == "pop" || name == "setdefault" || name == "clear" || name == "popitem") {
      throw TemplateError("access to attribute '" + name + "' of 'dict' object is unsafe (the sandbox is immutable)");
    }
    return Value::undefined(name);
  }
  if (object.is_list()) {
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
