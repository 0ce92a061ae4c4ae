// The parsed template: expressions and statements, each with the line and column it came from.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.hpp"

namespace superoffload::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// A binary or compare expression's operator, resolved when it is parsed (its spelling stays in
// Expr::name, for errors).
enum class Op : unsigned char { none, add, sub, mul, div, floordiv, mod, pow, concat, eq, ne, lt, gt, le, ge, in };

struct Expr {
  enum class Kind {
    literal,    // value
    name,       // name
    list,       // items; `tuple`: (a, b)
    dict,       // items: key, value, key, value, ...
    attribute,  // a.name
    subscript,  // a[b]
    slice,      // a[items[0]:items[1]:items[2]] (null parts absent)
    call,       // a(items..., keywords...)
    filter,     // a | name(items..., keywords...); a null for a {% filter %} block's input
    test,       // a is [not] name(items...)
    logical_not,
    negate,     // -a
    plus,       // +a
    binary,     // a name b: + - * / // % ** ~
    compare,    // a name b: == != < <= > >= in; negated: not in
    logical_and,
    logical_or,
    conditional,  // a if b else c (c may be null: Undefined)
  };
  Kind kind;
  int line = 0, column = 0;
  Value value;
  std::string name;
  Op op = Op::none;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  ExprPtr a, b, c;
  bool negated = false;
  bool tuple = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    text,          // text
    output,        // {{ expr }}
    if_chain,      // branches (condition, body); else_body
    for_loop,      // targets in expr [if filter]: body; else_body
    set,           // targets (or namespace targets[0] + attribute) = expr
    set_block,     // targets[0] = rendered body (filter optional)
    macro,         // name(params): body
    call_block,    // call expr (caller's params) : body as caller()
    filter_block,  // expr (a filter chain on a null input): body
    generation,    // {% generation %} body {% endgeneration %}
    loop_break,
    loop_continue,
  };
  Kind kind;
  int line = 0, column = 0;
  std::string text;  // text; macro name; set attribute
  ExprPtr expr, filter;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::string> targets;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro and caller parameters with defaults
  bool uses_loop = true;  // for_loop: whether its body names `loop` (else no loop object is made)
};

}  // namespace superoffload::jinja
