// Template: the renderer walks the parsed statements with jinja2's scoping — a for loop's
// body and a macro's call have their own variables, `set` elsewhere writes to the template's
// own — and Python's operators.
#include "jinja/template.hpp"

#include <cmath>
#include <optional>

#include "jinja/ast.hpp"
#include "jinja/builtins.hpp"
#include "jinja/lexer.hpp"
#include "jinja/parser.hpp"

namespace superoffload::jinja {

namespace {

using Frame = Dict;
using Scopes = std::vector<std::shared_ptr<Frame>>;

enum class Flow { normal, loop_break, loop_continue };

Value* find_in(Frame& frame, const std::string& name) {
  for (auto& [key, value] : frame) {
    if (key == name) return &value;
  }
  return nullptr;
}

void assign(Frame& frame, const std::string& name, Value value) {
  if (auto* slot = find_in(frame, name)) {
    *slot = std::move(value);
  } else {
    frame.emplace_back(name, std::move(value));
  }
}

int64_t as_index(const Value& v, const char* what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  throw TemplateError(std::string(what) + " must be an integer, not '" + v.type_name() + "'");
}

// Python's floor division and modulo.
int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

class Renderer {
 public:
  Renderer(const std::string& name, const TemplateOptions& options) : name_(name), options_(options) {}

  Rendered run(const Body& body, Dict variables) {
    // The globals are the same for every render and never assigned to (a `set` goes to the innermost frame).
    static const auto kGlobals = std::make_shared<Frame>(globals());
    scopes_.push_back(kGlobals);
    scopes_.push_back(std::make_shared<Frame>(std::move(variables)));
    scopes_.push_back(std::make_shared<Frame>());  // the template's own `set`s
    buffers_.push_back(&result_.text);
    exec(body);
    return std::move(result_);
  }

 private:
  // ---- Errors, limits, output.
  std::string where(int line, int column) const { return name_ + ":" + std::to_string(line) + ":" + std::to_string(column); }
  [[noreturn]] void rethrow_at(int line, int column) const {
    try {
      throw;
    } catch (const RaisedException& e) {
      if (std::string(e.what()).rfind(name_ + ":", 0) == 0) throw;
      throw RaisedException(where(line, column) + ": raise_exception: " + e.what());
    } catch (const TemplateError& e) {
      if (std::string(e.what()).rfind(name_ + ":", 0) == 0) throw;
      throw TemplateError(where(line, column) + ": " + e.what());
    } catch (const std::exception& e) {  // a bug of the engine's: still an error with a place, never a crash
      throw TemplateError(where(line, column) + ": internal error of the template engine (" + e.what() + "); please report it");
    }
  }
  void step() {
    if (++steps_ > options_.max_steps) {
      throw TemplateError("the template ran more than " + std::to_string(options_.max_steps) +
                          " steps: a loop or recursion that does not end?");
    }
  }
  void write(const std::string& text) {
    auto& out = *buffers_.back();
    out += text;
    if (out.size() > options_.max_output_bytes) {
      throw TemplateError("the template wrote more than " + std::to_string(options_.max_output_bytes) + " bytes");
    }
  }
  // Renders `body` into a string of its own (block set, filter block, caller, macro).
  std::string capture(const Body& body) {
    std::string text;
    buffers_.push_back(&text);
    try {
      exec(body);
    } catch (...) {
      buffers_.pop_back();
      throw;
    }
    buffers_.pop_back();
    return text;
  }

  // ---- Variables.
  const Value* find_variable(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      for (const auto& [key, value] : **it) {
        if (key == name) return &value;
      }
    }
    return nullptr;
  }
  Value lookup(const std::string& name) const {
    const Value* value = find_variable(name);
    return value ? *value : Value::undefined(name);
  }
  Frame& innermost() { return *scopes_.back(); }

  // ---- Statements.
  Flow exec(const Body& body) {
    for (const auto& node : body) {
      const Flow flow = exec(*node);
      if (flow != Flow::normal) return flow;
    }
    return Flow::normal;
  }

  Flow exec(const Node& n) {
    step();
    try {
      switch (n.kind) {
        case Node::Kind::text: write(n.text); return Flow::normal;
        case Node::Kind::output: {
          Value scratch;
          const Value& value = peek(*n.expr, scratch);
          if (value.is_string()) write(value.as_string());
          else write(value.str());
          return Flow::normal;
        }
        case Node::Kind::if_chain:
          for (const auto& [condition, body] : n.branches) {
            Value scratch;
            if (peek(*condition, scratch).truthy()) return exec(body);
          }
          return exec(n.else_body);
        case Node::Kind::for_loop: return exec_for(n);
        case Node::Kind::set: exec_set(n); return Flow::normal;
        case Node::Kind::set_block: {
          Value text = capture(n.body);
          assign(innermost(), n.targets[0], n.filter ? filter_chain(*n.filter, text) : text);
          return Flow::normal;
        }
        case Node::Kind::macro: assign(innermost(), n.text, make_macro(n, n.text)); return Flow::normal;
        case Node::Kind::call_block: {
          const Value caller = make_macro(n, "caller");
          CallArgs args = arguments(*n.expr);
          args.keyword.emplace_back("caller", caller);
          write(invoke(eval(*n.expr->a), args).str());
          return Flow::normal;
        }
        case Node::Kind::filter_block: write(filter_chain(*n.expr, capture(n.body)).str()); return Flow::normal;
        case Node::Kind::generation: {
          const bool tracked = buffers_.size() == 1;
          const size_t begin = buffers_.back()->size();
          const Flow flow = exec(n.body);
          if (tracked) result_.generation.emplace_back(begin, buffers_.back()->size());
          return flow;
        }
        case Node::Kind::loop_break: return Flow::loop_break;
        case Node::Kind::loop_continue: return Flow::loop_continue;
      }
    } catch (const std::exception&) {
      rethrow_at(n.line, n.column);
    }
    return Flow::normal;
  }

  Flow exec_for(const Node& n) {
    const Value iterable = eval(*n.expr);
    List owned;  // a list is iterated where it is (values are never changed in place); others are made one
    if (iterable.is_dict()) {
      for (const auto& [key, value] : iterable.as_dict()) owned.emplace_back(key);
    } else if (iterable.is_string()) {
      for (auto& c : code_points(iterable.as_string())) owned.emplace_back(std::move(c));
    } else if (!iterable.is_list() && !iterable.is_undefined()) {
      throw TemplateError("'" + iterable.type_name() + "' object is not iterable");
    }
    const List* iterated = iterable.is_list() ? &iterable.as_list() : &owned;
    auto bind = [&](Frame& frame, const Value& item) {
      if (n.targets.size() == 1) {
        assign(frame, n.targets[0], item);
        return;
      }
      if (!item.is_list() || item.as_list().size() != n.targets.size()) {
        throw TemplateError("cannot unpack " + item.repr() + " into " + std::to_string(n.targets.size()) + " variables");
      }
      for (size_t t = 0; t < n.targets.size(); ++t) assign(frame, n.targets[t], item.as_list()[t]);
    };
    if (n.filter) {  // the loop's own filter decides what it iterates (and loop.length)
      List kept;
      for (const auto& item : *iterated) {
        scopes_.push_back(std::make_shared<Frame>());
        bind(innermost(), item);
        const bool keep = eval(*n.filter).truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      owned = std::move(kept);
      iterated = &owned;
    }
    const List& items = *iterated;
    if (items.empty()) return exec(n.else_body);
    const auto length = static_cast<int64_t>(items.size());
    std::shared_ptr<Frame> frame;
    for (int64_t i = 0; i < length; ++i) {
      step();
      // Each iteration starts with a frame of its own; the last one's is cleared and reused where
      // nothing (a macro defined in the body) kept it.
      if (frame && frame.use_count() == 1) frame->clear();
      else frame = std::make_shared<Frame>();
      bind(*frame, items[static_cast<size_t>(i)]);
      if (n.uses_loop) {
        Map loop{{Value("index"), Value(i + 1)},
                 {Value("index0"), Value(i)},
                 {Value("revindex"), Value(length - i)},
                 {Value("revindex0"), Value(length - i - 1)},
                 {Value("first"), Value(i == 0)},
                 {Value("last"), Value(i + 1 == length)},
                 {Value("length"), Value(length)},
                 {Value("depth"), Value(int64_t{1})},
                 {Value("depth0"), Value(int64_t{0})},
                 {Value("previtem"), i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("previtem")},
                 {Value("nextitem"), i + 1 < length ? items[static_cast<size_t>(i + 1)] : Value::undefined("nextitem")},
                 {Value("cycle"), Value::function("cycle", [i](CallArgs& a) {
                    if (a.positional.empty()) throw TemplateError("loop.cycle needs at least one value");
                    return a.positional[static_cast<size_t>(i) % a.positional.size()];
                  })}};
        frame->emplace_back("loop", Value(std::move(loop)));
      }
      scopes_.push_back(frame);
      Flow flow;
      try {
        flow = exec(n.body);
      } catch (...) {
        scopes_.pop_back();
        throw;
      }
      scopes_.pop_back();
      if (flow == Flow::loop_break) break;
    }
    return Flow::normal;
  }

  void exec_set(const Node& n) {
    Value value = eval(*n.expr);
    if (!n.text.empty()) {  // ns.attribute = value
      Value target = lookup(n.targets[0]);
      if (!target.is_namespace()) {
        throw TemplateError("cannot assign attribute on non-namespace object '" + n.targets[0] + "' (" + target.type_name() + ")");
      }
      assign(target.as_namespace().attributes, n.text, std::move(value));
      return;
    }
    if (n.targets.size() == 1) {
      assign(innermost(), n.targets[0], std::move(value));
      return;
    }
    if (!value.is_list() || value.as_list().size() != n.targets.size()) {
      throw TemplateError("cannot unpack " + value.repr() + " into " + std::to_string(n.targets.size()) + " variables");
    }
    for (size_t t = 0; t < n.targets.size(); ++t) assign(innermost(), n.targets[t], value.as_list()[t]);
  }

  // A macro (or a call block's caller): its parameters bound per call, its body rendered in a
  // scope of its own over the scopes where it was defined.
  Value make_macro(const Node& n, const std::string& name) {
    const Scopes closure = scopes_;
    return Value::function(name, [this, &n, closure](CallArgs& args) -> Value {
      if (++depth_ > options_.max_call_depth) {
        --depth_;
        throw TemplateError("macro calls nest deeper than " + std::to_string(options_.max_call_depth) +
                            ": a recursion that does not end?");
      }
      step();
      auto frame = std::make_shared<Frame>();
      List varargs;
      Dict kwargs;
      for (size_t p = 0; p < args.positional.size(); ++p) {
        if (p < n.params.size()) assign(*frame, n.params[p].first, args.positional[p]);
        else varargs.push_back(args.positional[p]);
      }
      for (const auto& [key, value] : args.keyword) {
        const bool parameter = std::any_of(n.params.begin(), n.params.end(), [&](const auto& p) { return p.first == key; });
        if (parameter || key == "caller") assign(*frame, key, value);
        else kwargs.emplace_back(key, value);
      }
      Scopes saved = std::move(scopes_);
      scopes_ = closure;
      scopes_.push_back(frame);
      std::string text;
      try {
        for (const auto& [param, fallback] : n.params) {
          if (!find_in(*frame, param)) assign(*frame, param, fallback ? eval(*fallback) : Value::undefined(param));
        }
        assign(*frame, "varargs", Value::tuple(varargs));
        assign(*frame, "kwargs", Value(kwargs));
        text = capture(n.body);
      } catch (...) {
        scopes_ = std::move(saved);
        --depth_;
        throw;
      }
      scopes_ = std::move(saved);
      --depth_;
      return Value(text);
    });
  }

  // ---- Expressions.
  CallArgs arguments(const Expr& e) {
    CallArgs args;
    for (const auto& item : e.items) args.positional.push_back(eval(*item));
    for (const auto& [key, value] : e.keywords) args.keyword.emplace_back(key, eval(*value));
    return args;
  }

  Value invoke(const Value& callee, CallArgs& args) {
    if (!callee.is_callable()) {
      if (callee.is_undefined()) throw TemplateError("'" + callee.undefined_name() + "' is undefined");
      throw TemplateError("'" + callee.type_name() + "' object is not callable");
    }
    return callee.as_callable().call(args);
  }

  Value filter_chain(const Expr& chain, const Value& input) {
    const Value inner = chain.a ? filter_chain(*chain.a, input) : input;
    CallArgs args = arguments(chain);
    return apply_filter(chain.name, inner, args);
  }

  Value attribute(const Value& object, const std::string& name) {
    if (object.is_undefined()) throw TemplateError("'" + object.undefined_name() + "' is undefined");
    if (object.is_dict()) {
      const Value m = method(object, name);
      return m.is_undefined() ? object.get(name) : m;
    }
    if (object.is_namespace()) return object.get(name);
    return method(object, name);
  }

  Value subscript(const Value& object, const Value& key) {
    if (object.is_undefined()) throw TemplateError("'" + object.undefined_name() + "' is undefined");
    if (object.is_dict() || object.is_namespace()) {
      if (object.is_dict()) return object.item(key);
      if (key.is_string()) return object.get(key.as_string());
      return Value::undefined(key.repr());
    }
    if (object.is_list() || object.is_string()) {
      if (key.is_string()) return attribute(object, key.as_string());
      std::vector<std::string> points;
      if (object.is_string()) points = code_points(object.as_string());
      const auto size = static_cast<int64_t>(object.is_list() ? object.as_list().size() : points.size());
      if (!key.is_int() && !key.is_bool()) return Value::undefined(key.repr());  // jinja2: no such item
      int64_t index = as_index(key, "an index");
      if (index < 0) index += size;
      if (index < 0 || index >= size) return Value::undefined("index " + key.repr());
      return object.is_list() ? object.as_list()[static_cast<size_t>(index)] : Value(points[static_cast<size_t>(index)]);
    }
    return Value::undefined(key.repr());
  }

  Value slice(const Value& object, const Expr& e) {
    if (object.is_undefined()) throw TemplateError("'" + object.undefined_name() + "' is undefined");
    std::optional<int64_t> parts[3];
    for (size_t k = 0; k < 3 && k < e.items.size(); ++k) {
      if (!e.items[k]) continue;
      const Value v = eval(*e.items[k]);
      if (!v.is_none()) parts[k] = as_index(v, "a slice index");
    }
    std::vector<std::string> points;
    if (object.is_string()) points = code_points(object.as_string());
    else if (!object.is_list()) return Value::undefined("a slice");  // jinja2's getitem finds nothing there
    const auto size = static_cast<int64_t>(object.is_list() ? object.as_list().size() : points.size());
    const int64_t step_by = parts[2].value_or(1);
    if (step_by == 0) throw TemplateError("slice step cannot be zero");
    auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
      if (!v) return fallback;
      int64_t x = *v < 0 ? *v + size : *v;
      return step_by > 0 ? std::clamp<int64_t>(x, 0, size) : std::clamp<int64_t>(x, -1, size - 1);
    };
    const int64_t begin = clamp(parts[0], step_by > 0 ? 0 : size - 1), end = clamp(parts[1], step_by > 0 ? size : -1);
    List items;
    std::string text;
    for (int64_t i = begin; step_by > 0 ? i < end : i > end; i += step_by) {
      if (object.is_list()) items.push_back(object.as_list()[static_cast<size_t>(i)]);
      else text += points[static_cast<size_t>(i)];
    }
    return object.is_list() ? Value(items) : Value(text);
  }

  static bool numeric(const Value& v) { return v.is_number() || v.is_bool(); }

  // Python's int ** int for a non-negative exponent, by squaring; past int64 it is refused
  // (Python's ints have no bound, a chat template's numbers do).
  static Value int_power(int64_t base, int64_t exponent) {
    int64_t result = 1;
    while (exponent > 0) {
      if ((exponent & 1) && __builtin_mul_overflow(result, base, &result)) break;
      exponent >>= 1;
      if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) {
        if (result == 0) return int64_t{0};
        exponent = -1;
        break;
      }
    }
    if (exponent != 0) throw TemplateError("an integer power past 64 bits");
    return result;
  }

  // str % args where the text has no conversion: Python returns it unchanged when args is a
  // mapping-like (list, dict) or an empty tuple, and refuses other arguments. Conversions
  // (%s, %d, ...) are printf-style formatting, which chat templates do not use: refused.
  static Value percent_format(const Value& format, const Value& args) {
    if (format.as_string().find('%') != std::string::npos) {
      throw TemplateError("printf-style formatting ('%' on a string) is not supported; use ~ or format with filters");
    }
    if ((args.is_list() && !args.is_tuple()) || args.is_dict() || args.is_undefined() ||
        (args.is_tuple() && args.as_list().empty())) {
      return format;
    }
    throw TemplateError("not all arguments converted during string formatting");
  }
  static int64_t int_of(const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); }

  Value arithmetic(const Expr& e, const Value& a, const Value& b) {
    const Op op = e.op;
    if (op == Op::concat) return a.str() + b.str();
    if (op == Op::mod && a.is_string()) return percent_format(a, b);  // an undefined b is a mapping-like to Python's %
    if (a.is_undefined() || b.is_undefined()) {
      throw TemplateError("'" + (a.is_undefined() ? a : b).undefined_name() + "' is undefined");
    }
    const bool both_int = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
    if (numeric(a) && numeric(b)) {
      if (op == Op::add) return both_int ? Value(int_of(a) + int_of(b)) : Value(a.as_double() + b.as_double());
      if (op == Op::sub) return both_int ? Value(int_of(a) - int_of(b)) : Value(a.as_double() - b.as_double());
      if (op == Op::mul) return both_int ? Value(int_of(a) * int_of(b)) : Value(a.as_double() * b.as_double());
      if (op == Op::pow) {
        if (both_int && int_of(b) >= 0) return int_power(int_of(a), int_of(b));
        if (a.as_double() < 0 && std::floor(b.as_double()) != b.as_double()) {
          throw TemplateError("a negative number to a fractional power is a complex number, which no chat template needs");
        }
        return std::pow(a.as_double(), b.as_double());
      }
      if (b.as_double() == 0) throw TemplateError(op == Op::mod ? "integer modulo by zero" : "division by zero");
      if (op == Op::div) return a.as_double() / b.as_double();
      if (op == Op::floordiv) return both_int ? Value(floor_div(int_of(a), int_of(b))) : Value(std::floor(a.as_double() / b.as_double()));
      if (op == Op::mod) {
        if (both_int) return int_of(a) - floor_div(int_of(a), int_of(b)) * int_of(b);
        // Python's float %: the sign of the divisor, and -0.0 where that is negative.
        double r = std::fmod(a.as_double(), b.as_double());
        if (r != 0 && ((r < 0) != (b.as_double() < 0))) r += b.as_double();
        if (r == 0) r = std::copysign(0.0, b.as_double());
        return r;
      }
    }
    if (op == Op::add && a.is_string() && b.is_string()) return a.as_string() + b.as_string();
    if (op == Op::add && a.is_list() && b.is_list()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return out;
    }
    // str * int and list * int, either way round; a bool counts as an int, as in Python.
    const bool a_sequence = a.is_string() || a.is_list(), b_sequence = b.is_string() || b.is_list();
    if (op == Op::mul && ((a_sequence && (b.is_int() || b.is_bool())) || (b_sequence && (a.is_int() || a.is_bool())))) {
      const Value& sequence = a_sequence ? a : b;
      const int64_t times = int_of(a_sequence ? b : a);
      const size_t unit = sequence.is_string() ? sequence.as_string().size() : sequence.as_list().size() * 16;
      if (times > 0 && unit > 0 && static_cast<uint64_t>(times) > options_.max_output_bytes / unit) {
        throw TemplateError("a " + sequence.type_name() + " repeated past the output limit");
      }
      List out;
      std::string text;
      for (int64_t k = 0; k < times; ++k) {
        if (sequence.is_string()) text += sequence.as_string();
        else out.insert(out.end(), sequence.as_list().begin(), sequence.as_list().end());
      }
      return sequence.is_string() ? Value(text) : Value(out);
    }
    throw TemplateError("unsupported operand type(s) for " + e.name + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  }

  bool contains(const Value& container, const Value& item) {
    if (container.is_string()) {
      if (!item.is_string()) throw TemplateError("'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    }
    if (container.is_dict()) {
      if ((item.is_list() && !item.is_tuple()) || item.is_dict()) throw TemplateError("unhashable type: '" + item.type_name() + "'");
      return find(container.as_dict(), item) != nullptr;
    }
    if (container.is_list()) {
      for (const auto& x : container.as_list()) {
        if (equal(x, item)) return true;
      }
      return false;
    }
    if (container.is_undefined()) return false;  // jinja2's Undefined iterates as empty: `'x' in controls` is false
    throw TemplateError("argument of type '" + container.type_name() + "' is not iterable");
  }

  // The value of `e` without a copy where it already lives: a literal, a variable, or an entry of
  // a dict or list that one of those holds (message['content'], message.role, messages[0]).
  // Chat templates mostly read, compare and print such values. Anything else is computed into
  // `scratch`. The reference stays valid while the caller evaluates further expressions: they
  // assign nothing to the scopes that exist (a macro or caller() sets names in frames of its own)
  // and no list or dict is ever changed in place; namespace attributes, which `set ns.x` does
  // change, are always copied.
  const Value& peek(const Expr& e, Value& scratch) {
    switch (e.kind) {
      case Expr::Kind::literal: return e.value;
      case Expr::Kind::name:
        if (const Value* value = find_variable(e.name)) return *value;
        break;
      case Expr::Kind::subscript:
      case Expr::Kind::attribute: {
        Value base_scratch, key_scratch;
        const Value& base = peek(*e.a, base_scratch);
        const bool attribute_of = e.kind == Expr::Kind::attribute;
        const Value& key = attribute_of ? key_scratch : peek(*e.b, key_scratch);
        const Value* entry = nullptr;
        if (base.is_dict() && (attribute_of ? !is_dict_method(e.name) : key.is_string() || key.is_int())) {
          entry = attribute_of ? find(base.as_dict(), std::string_view(e.name)) : find(base.as_dict(), key);
        } else if (base.is_list() && !attribute_of && key.is_int()) {
          const auto size = static_cast<int64_t>(base.as_list().size());
          const int64_t index = key.as_int() < 0 ? key.as_int() + size : key.as_int();
          if (index >= 0 && index < size) entry = &base.as_list()[static_cast<size_t>(index)];
        }
        if (entry && &base != &base_scratch) return *entry;
        try {
          if (entry) scratch = *entry;  // the container is a temporary: keep the entry
          else scratch = attribute_of ? attribute(base, e.name) : subscript(base, key);
        } catch (const std::exception&) {
          rethrow_at(e.line, e.column);
        }
        return scratch;
      }
      default: break;
    }
    scratch = eval(e);
    return scratch;
  }

  Value eval(const Expr& e) {
    try {
      switch (e.kind) {
        case Expr::Kind::literal: return e.value;
        case Expr::Kind::name: return lookup(e.name);
        case Expr::Kind::list: {
          List items;
          for (const auto& item : e.items) items.push_back(eval(*item));
          return e.tuple ? Value::tuple(std::move(items)) : Value(std::move(items));
        }
        case Expr::Kind::dict: {
          Map dict;
          for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
            Value key = eval(*e.items[k]);
            insert(dict, std::move(key), eval(*e.items[k + 1]));
          }
          return dict;
        }
        case Expr::Kind::attribute: {
          Value base;
          return attribute(peek(*e.a, base), e.name);
        }
        case Expr::Kind::subscript: {
          Value base, key;
          return subscript(peek(*e.a, base), peek(*e.b, key));
        }
        case Expr::Kind::slice: return slice(eval(*e.a), e);
        case Expr::Kind::call: {
          const Value callee = eval(*e.a);
          CallArgs args = arguments(e);
          return invoke(callee, args);
        }
        case Expr::Kind::filter: {
          Value scratch;
          const Value& input = e.a ? peek(*e.a, scratch) : scratch;
          CallArgs args = arguments(e);
          return apply_filter(e.name, input, args);
        }
        case Expr::Kind::test: {
          Value scratch;
          const Value& input = peek(*e.a, scratch);
          std::vector<Value> args;
          for (const auto& item : e.items) args.push_back(eval(*item));
          return apply_test(e.name, input, args) != e.negated;
        }
        case Expr::Kind::logical_not: {
          Value scratch;
          return !peek(*e.a, scratch).truthy();
        }
        case Expr::Kind::negate:
        case Expr::Kind::plus: {
          const Value v = eval(*e.a);
          if (!numeric(v)) throw TemplateError("bad operand type for unary " + std::string(e.kind == Expr::Kind::negate ? "-" : "+") + ": '" + v.type_name() + "'");
          if (e.kind == Expr::Kind::plus) return v;
          return v.is_float() ? Value(-v.as_double()) : Value(-int_of(v));
        }
        case Expr::Kind::binary: {
          Value a_scratch, b_scratch;
          const Value& a = peek(*e.a, a_scratch);
          return arithmetic(e, a, peek(*e.b, b_scratch));
        }
        case Expr::Kind::compare: {
          Value a_scratch, b_scratch;
          const Value& a = peek(*e.a, a_scratch);
          const Value& b = peek(*e.b, b_scratch);
          switch (e.op) {
            case Op::in: return contains(b, a) != e.negated;
            case Op::eq: return equal(a, b);
            case Op::ne: return !equal(a, b);
            case Op::lt: return less(a, b);
            case Op::gt: return less(b, a);
            case Op::le: return !less(b, a);
            default: return !less(a, b);  // >=
          }
        }
        case Expr::Kind::logical_and: {
          Value a = eval(*e.a);
          return a.truthy() ? eval(*e.b) : a;
        }
        case Expr::Kind::logical_or: {
          Value a = eval(*e.a);
          return a.truthy() ? a : eval(*e.b);
        }
        case Expr::Kind::conditional: {
          Value scratch;
          if (peek(*e.b, scratch).truthy()) return eval(*e.a);
          return e.c ? eval(*e.c) : Value::undefined("the else of a conditional");
        }
      }
    } catch (const std::exception&) {
      rethrow_at(e.line, e.column);
    }
    return Value();
  }

  const std::string& name_;
  const TemplateOptions& options_;
  Scopes scopes_;
  std::vector<std::string*> buffers_;
  Rendered result_;
  int64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

namespace {

bool contains_generation(const Body& body) {
  for (const auto& node : body) {
    if (node->kind == Node::Kind::generation) return true;
    bool inside = contains_generation(node->body) || contains_generation(node->else_body);
    for (const auto& branch : node->branches) inside = inside || contains_generation(branch.second);
    if (inside) return true;
  }
  return false;
}

bool mentions(const Expr* e, const std::string& name) {
  if (!e) return false;
  if (e->kind == Expr::Kind::name && e->name == name) return true;
  if (mentions(e->a.get(), name) || mentions(e->b.get(), name) || mentions(e->c.get(), name)) return true;
  for (const auto& item : e->items) {
    if (mentions(item.get(), name)) return true;
  }
  for (const auto& [key, value] : e->keywords) {
    if (mentions(value.get(), name)) return true;
  }
  return false;
}

bool mentions(const Body& body, const std::string& name) {
  for (const auto& node : body) {
    if (mentions(node->expr.get(), name) || mentions(node->filter.get(), name)) return true;
    if (mentions(node->body, name) || mentions(node->else_body, name)) return true;
    for (const auto& [condition, branch] : node->branches) {
      if (mentions(condition.get(), name) || mentions(branch, name)) return true;
    }
    for (const auto& [parameter, fallback] : node->params) {
      if (mentions(fallback.get(), name)) return true;
    }
  }
  return false;
}

// Most loops of chat templates never look at `loop`; making its dozen members for every
// iteration is most of what such a loop costs. (Conservative: any mention of the name counts.)
void note_loop_use(Body& body) {
  for (auto& node : body) {
    if (node->kind == Node::Kind::for_loop) node->uses_loop = mentions(node->body, "loop");
    note_loop_use(node->body);
    note_loop_use(node->else_body);
    for (auto& branch : node->branches) note_loop_use(branch.second);
  }
}

}  // namespace

Template::Template(std::string_view source, std::string name, TemplateOptions options)
    : name_(std::move(name)), options_(options) {
  // jinja2's keep_trailing_newline = False: one newline at the very end is not output.
  if (source.size() >= 2 && source.substr(source.size() - 2) == "\r\n") source.remove_suffix(2);
  else if (!source.empty() && source.back() == '\n') source.remove_suffix(1);
  const auto tokens = tokenize(source, name_, {.trim_blocks = options_.trim_blocks, .lstrip_blocks = options_.lstrip_blocks});
  auto body = parse(tokens, name_);
  note_loop_use(body);
  body_ = std::make_shared<const Body>(std::move(body));
}

bool Template::has_generation_blocks() const { return contains_generation(*body_); }

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

Rendered Template::render(Dict variables) const { return Renderer(name_, options_).run(*body_, std::move(variables)); }

Rendered Template::render(const nlohmann::ordered_json& variables) const {
  const Value v = Value::from_json(variables.is_null() ? nlohmann::ordered_json::object() : variables);
  if (!v.is_dict()) throw TemplateError(name_ + ": the variables must be a JSON object");
  Dict names;
  for (const auto& [key, value] : v.as_dict()) names.emplace_back(key.as_string(), value);  // JSON keys are strings
  return render(std::move(names));
}

}  // namespace superoffload::jinja
