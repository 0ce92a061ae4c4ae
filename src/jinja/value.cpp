// Value: Python's semantics for what chat templates print and compare.
#include "jinja/value.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "jinja/python_text.hpp"
#include "jinja/template_error.hpp"

namespace superoffload::jinja {

namespace {

template <class Json>
Value value_of_json(const Json& json) {
  switch (json.type()) {
    case nlohmann::detail::value_t::null: return nullptr;
    case nlohmann::detail::value_t::boolean: return json.template get<bool>();
    case nlohmann::detail::value_t::number_integer: return json.template get<int64_t>();
    case nlohmann::detail::value_t::number_unsigned: return static_cast<int64_t>(json.template get<uint64_t>());
    case nlohmann::detail::value_t::number_float: return json.template get<double>();
    case nlohmann::detail::value_t::string: return json.template get<std::string>();
    case nlohmann::detail::value_t::array: {
      List list;
      list.reserve(json.size());
      for (const auto& element : json) list.push_back(value_of_json(element));
      return list;
    }
    case nlohmann::detail::value_t::object: {
      Map dict;
      dict.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) dict.emplace_back(Value(it.key()), value_of_json(it.value()));
      return dict;
    }
    default: return Value::undefined("a JSON value of another type");
  }
}

// nlohmann's SAX events built into values: containers are kept open on a stack, each finished
// value goes into the container on top (after its key, for an object).
class ValueBuilder : public nlohmann::json_sax<nlohmann::ordered_json> {
 public:
  Value result;

  bool null() override { return add(nullptr); }
  bool boolean(bool v) override { return add(v); }
  bool number_integer(number_integer_t v) override { return add(static_cast<int64_t>(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(static_cast<int64_t>(v)); }
  bool number_float(number_float_t v, const string_t&) override { return add(static_cast<double>(v)); }
  bool string(string_t& v) override { return add(Value(std::move(v))); }
  bool binary(binary_t&) override { return false; }  // JSON text has none
  bool start_object(std::size_t) override {
    deeper();
    open_.push_back({Map{}, {}, {}, true});
    return true;
  }
  bool key(string_t& v) override {
    open_.back().key = std::move(v);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override {
    deeper();
    open_.push_back({{}, List{}, {}, false});
    return true;
  }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    // What nlohmann::json::parse would throw, with its own type (a parse_error, or out_of_range
    // for a number too large).
    if (const auto* error = dynamic_cast<const nlohmann::detail::parse_error*>(&e)) throw *error;
    if (const auto* error = dynamic_cast<const nlohmann::detail::out_of_range*>(&e)) throw *error;
    throw std::invalid_argument(e.what());
  }

 private:
  struct Open {
    Map map;
    List list;
    std::string key;
    bool is_object;
  };
  bool add(Value v) {
    if (open_.empty()) {
      result = std::move(v);
    } else if (open_.back().is_object) {
      insert(open_.back().map, Value(std::move(open_.back().key)), std::move(v));
    } else {
      open_.back().list.push_back(std::move(v));
    }
    return true;
  }
  bool close() {
    Open done = std::move(open_.back());
    open_.pop_back();
    return done.is_object ? add(Value(std::move(done.map))) : add(Value(std::move(done.list)));
  }
  // Values are freed recursively: nesting far past what any record has would overflow the stack.
  void deeper() const {
    constexpr size_t kMaxDepth = 512;
    if (open_.size() >= kMaxDepth) {
      throw std::invalid_argument("JSON nested deeper than " + std::to_string(kMaxDepth) + " levels");
    }
  }
  std::vector<Open> open_;
};

}  // namespace

Value Value::parse_json(std::string_view text) {
  ValueBuilder builder;
  nlohmann::ordered_json::sax_parse(text, &builder);
  return std::move(builder.result);
}

Value::Value(const Dict& d) {
  Map m;
  m.reserve(d.size());
  for (const auto& [name, value] : d) m.emplace_back(Value(name), value);
  v_ = std::make_shared<Map>(std::move(m));
}

Value Value::from_json(const nlohmann::ordered_json& json) { return value_of_json(json); }
Value Value::from_json(const nlohmann::json& json) { return value_of_json(json); }

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_double() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().empty();
  if (is_dict()) return !as_dict().empty();
  return true;
}

std::string Value::type_name() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "str";
  if (is_list()) return "list";
  if (is_dict()) return "dict";
  if (is_namespace()) return "Namespace";
  return "function";
}

std::string Value::str() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return repr();
}

std::string Value::repr() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return python_float(as_double());
  if (is_string()) return python_string_repr(as_string());
  if (is_list()) {
    std::string out = is_tuple() ? "(" : "[";
    for (size_t i = 0; i < as_list().size(); ++i) out += (i ? ", " : "") + as_list()[i].repr();
    if (is_tuple()) return out + (as_list().size() == 1 ? ",)" : ")");
    return out + "]";
  }
  if (is_dict()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, value] : as_dict()) {
      out += (first ? "" : ", ") + key.repr() + ": " + value.repr();
      first = false;
    }
    return out + "}";
  }
  if (is_namespace()) return "<Namespace>";
  return "<function " + as_callable().name + ">";
}

Value Value::get(const std::string& key) const {
  if (is_dict()) {
    if (const Value* v = find(as_dict(), std::string_view(key))) return *v;
  } else if (is_namespace()) {
    for (const auto& [k, v] : as_namespace().attributes) {
      if (k == key) return v;
    }
  }
  return Value::undefined(key);
}

Value Value::item(const Value& key) const {
  if (const Value* v = is_dict() ? find(as_dict(), key) : nullptr) return *v;
  return Value::undefined(key.is_string() ? key.as_string() : key.repr());
}

const Value* find(const Map& map, const Value& key) {
  if (key.is_string()) return find(map, std::string_view(key.as_string()));
  for (const auto& [k, v] : map) {
    if (equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* find(const Map& map, std::string_view key) {
  for (const auto& [k, v] : map) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

void insert(Map& map, Value key, Value value) {
  if (key.is_list() && !key.is_tuple()) throw TemplateError("unhashable type: 'list'");
  if (key.is_dict()) throw TemplateError("unhashable type: 'dict'");
  if (key.is_undefined()) throw TemplateError("'" + key.undefined_name() + "' is undefined");
  for (auto& [k, v] : map) {
    if (equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  map.emplace_back(std::move(key), std::move(value));
}

bool equal(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    const auto ai = a.is_bool() ? int64_t{a.as_bool()} : a.as_int(), bi = b.is_bool() ? int64_t{b.as_bool()} : b.as_int();
    return ai == bi;
  }
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.is_none() && b.is_none()) return true;
  if (a.is_undefined() && b.is_undefined()) return true;
  if (a.is_list() && b.is_list()) {
    const auto &x = a.as_list(), &y = b.as_list();
    if (x.size() != y.size() || a.is_tuple() != b.is_tuple()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!equal(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    if (a.as_dict().size() != b.as_dict().size()) return false;
    for (const auto& [key, value] : a.as_dict()) {
      const Value* other = find(b.as_dict(), key);
      if (!other || !equal(value, *other)) return false;
    }
    return true;
  }
  if (a.is_namespace() && b.is_namespace()) return &a.as_namespace() == &b.as_namespace();
  return false;
}

bool less(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less(x[i], y[i])) return true;
      if (less(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  throw TemplateError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace superoffload::jinja
