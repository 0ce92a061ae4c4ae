// A Jinja value as a chat template sees it: Python's none, bool, int, float, str, list and
// dict (insertion-ordered, as Python's), plus jinja2's Undefined and callables (macros,
// built-in functions, bound methods). Lists and dicts are shared, as Python objects are;
// the sandbox HF renders in (ImmutableSandboxedEnvironment) never changes them, except a
// namespace() object, whose attributes `set ns.x = ...` assigns.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace superoffload::jinja {

class Value;
using List = std::vector<Value>;
// Names and their values: scopes, namespace() attributes, keyword arguments; insertion order, unique keys.
using Dict = std::vector<std::pair<std::string, Value>>;
// A Python dict: insertion order, unique keys of any hashable type ({0: 'a'} is a real template's).
using Map = std::vector<std::pair<Value, Value>>;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<Value(CallArgs&)>;

struct Undefined {
  std::string name;  // what was looked up, for errors
};
struct Namespace {
  Dict attributes;
};
struct Callable {
  std::string name;
  Function call;
};

class Value {
 public:
  using Storage = std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<List>,
                               std::shared_ptr<Map>, std::shared_ptr<Namespace>, std::shared_ptr<Callable>>;

  Value() : v_(Undefined{}) {}
  Value(std::nullptr_t) : v_(nullptr) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(List l) : v_(std::make_shared<List>(std::move(l))) {}
  Value(Map m) : v_(std::make_shared<Map>(std::move(m))) {}
  Value(const Dict& d);  // a dict with string keys
  Value(std::shared_ptr<Namespace> n) : v_(std::move(n)) {}
  Value(std::shared_ptr<Callable> c) : v_(std::move(c)) {}
  static Value undefined(std::string name) { return Value(Storage(Undefined{std::move(name)})); }
  static Value function(std::string name, Function f) {
    return Value(std::make_shared<Callable>(Callable{std::move(name), std::move(f)}));
  }
  // A tuple: a list that prints as (a, b) and is not equal to a list, as in Python.
  static Value tuple(List items) {
    Value v(std::move(items));
    v.tuple_ = true;
    return v;
  }
  // JSON objects keep their order (ordered_json), as Python's json.loads does.
  static Value from_json(const nlohmann::ordered_json& json);
  static Value from_json(const nlohmann::json& json);
  // JSON text straight to values, without a JSON document on the way (a chat dataset's records).
  // Objects keep their order; a repeated key keeps its first place and its last value, as
  // Python's json.loads. Throws nlohmann::json::parse_error for text that is not JSON.
  static Value parse_json(std::string_view text);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<std::nullptr_t>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float(); }  // bool excluded, as jinja2's `number` test
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(v_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Map>>(v_); }
  bool is_namespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(v_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<Callable>>(v_); }
  bool is_tuple() const { return tuple_; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_double() const { return is_int() ? static_cast<double>(as_int()) : is_bool() ? (as_bool() ? 1.0 : 0.0) : std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  const Map& as_dict() const { return *std::get<std::shared_ptr<Map>>(v_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(v_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }

  // Python's truth: empty containers, 0, "" and none are false; Undefined is false.
  bool truthy() const;
  // Python's type name ("str", "int", "list", "dict", "NoneType", ...), for errors.
  std::string type_name() const;
  // What {{ value }} prints: Python's str() (True, None, 1.0, ['a', 1], {'k': 'v'}); Undefined prints "".
  std::string str() const;
  // Python's repr() (strings quoted as Python quotes them).
  std::string repr() const;
  // The member of a dict or namespace named by a string, or Undefined.
  Value get(const std::string& key) const;
  // d[key] of a dict, keys compared as Python hashes them (1, 1.0 and True are one key), or Undefined.
  Value item(const Value& key) const;

 private:
  explicit Value(Storage v) : v_(std::move(v)) {}
  Storage v_;
  bool tuple_ = false;
};

// The entry of `map` whose key equals `key` as a Python dict finds it, or null.
const Value* find(const Map& map, const Value& key);
// The entry whose key is the string `key`, or null.
const Value* find(const Map& map, std::string_view key);
// d[key] = value: a new key goes last, an existing one keeps its place. Throws TemplateError for
// an unhashable key (a list or dict), as Python's TypeError.
void insert(Map& map, Value key, Value value);

// Python's ==, across int, float and bool as Python compares them.
bool equal(const Value& a, const Value& b);
// Python's <; throws (with both types) where Python would raise TypeError.
bool less(const Value& a, const Value& b);

}  // namespace superoffload::jinja
