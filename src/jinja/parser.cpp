// parse.
#include "jinja/parser.hpp"

#include <algorithm>

#include "jinja/template_error.hpp"

namespace superoffload::jinja {

namespace {

constexpr int kMaxNesting = 200;  // statements and expressions: deeper is hostile

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name) : t_(tokens), name_(name) {}

  Body parse_all() {
    auto body = parse_body({});
    if (peek().kind != Token::Kind::end) fail(peek(), "unexpected tag");
    return body;
  }

 private:
  using Kind = Token::Kind;
  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool at_op(const char* op) const { return peek().kind == Kind::op && peek().text == op; }
  bool at_name(const char* word) const { return peek().kind == Kind::name && peek().text == word; }
  [[noreturn]] void fail(const Token& at, const std::string& what) const {
    throw TemplateError(name_ + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": " + what);
  }
  std::string describe(const Token& token) const {
    switch (token.kind) {
      case Kind::end: return "the end of the template";
      case Kind::block_end: return "'%}'";
      case Kind::variable_end: return "'}}'";
      case Kind::text: return "text";
      case Kind::string: return "a string";
      default: return "'" + token.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!at_op(op)) fail(peek(), std::string("expected '") + op + "', found " + describe(peek()));
    next();
  }
  std::string expect_name() {
    if (peek().kind != Kind::name) fail(peek(), "expected a name, found " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != Kind::block_end) fail(peek(), "expected '%}', found " + describe(peek()));
    next();
  }
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail(p_.peek(), "the template nests deeper than " + std::to_string(kMaxNesting) + " levels");
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  template <class T>
  static std::unique_ptr<T> make(typename T::Kind kind, const Token& at) {
    auto n = std::make_unique<T>();
    n->kind = kind;
    n->line = at.line;
    n->column = at.column;
    return n;
  }

  // Statements up to a block tag whose keyword is in `ends` (left unconsumed, after its `{%`);
  // the last of `ends` closes the block, and is what a missing end names.
  Body parse_body(const std::vector<std::string>& ends) {
    Depth depth(*this);
    Body body;
    for (;;) {
      const Token& token = peek();
      if (token.kind == Kind::end) {
        if (!ends.empty()) fail(token, "expected {% " + ends.back() + " %} before the end of the template");
        return body;
      }
      if (token.kind == Kind::text) {
        auto n = make<Node>(Node::Kind::text, token);
        n->text = next().text;
        body.push_back(std::move(n));
      } else if (token.kind == Kind::variable_begin) {
        next();
        auto n = make<Node>(Node::Kind::output, token);
        n->expr = parse_expression();
        if (peek().kind != Kind::variable_end) fail(peek(), "expected '}}', found " + describe(peek()));
        next();
        body.push_back(std::move(n));
      } else if (token.kind == Kind::block_begin) {
        const Token& keyword = peek(1);
        if (keyword.kind != Kind::name) fail(keyword, "expected a statement keyword after '{%'");
        if (std::find(ends.begin(), ends.end(), keyword.text) != ends.end()) {
          next();  // '{%'; the caller reads the keyword
          return body;
        }
        const bool closes = keyword.text.rfind("end", 0) == 0 || keyword.text == "elif" || keyword.text == "else";
        if (closes && !ends.empty()) fail(keyword, "expected '" + ends.back() + "', found '" + keyword.text + "'");
        next();
        body.push_back(parse_statement());
      } else {
        fail(token, "unexpected " + describe(token));
      }
    }
  }

  NodePtr parse_statement() {
    const Token& keyword = next();
    const std::string& k = keyword.text;
    if (k == "if") return parse_if(keyword);
    if (k == "for") return parse_for(keyword);
    if (k == "set") return parse_set(keyword);
    if (k == "macro") return parse_macro(keyword);
    if (k == "call") return parse_call(keyword);
    if (k == "filter") return parse_filter_block(keyword);
    if (k == "generation") {
      auto n = make<Node>(Node::Kind::generation, keyword);
      expect_block_end();
      n->body = parse_body({"endgeneration"});
      end_tag("endgeneration");
      return n;
    }
    if (k == "break" || k == "continue") {
      if (loops_ == 0) fail(keyword, "'" + k + "' outside a for loop");
      expect_block_end();
      return make<Node>(k == "break" ? Node::Kind::loop_break : Node::Kind::loop_continue, keyword);
    }
    fail(keyword, "unknown statement '" + k + "'" +
                      (k.rfind("end", 0) == 0 ? " (no open block ends here)" : std::string(" (this engine renders chat "
                                                                                            "templates: if, for, set, macro, call, filter, generation, break, continue, raw)")));
  }

  void end_tag(const char* keyword) {
    if (!at_name(keyword)) fail(peek(), std::string("expected '") + keyword + "', found " + describe(peek()));
    next();
    expect_block_end();
  }

  NodePtr parse_if(const Token& at) {
    auto n = make<Node>(Node::Kind::if_chain, at);
    // As jinja2: an if's test is no conditional expression (`{% if a if b %}` is refused).
    auto condition = parse_conditional(false);
    expect_block_end();
    for (;;) {
      auto body = parse_body({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(condition), std::move(body));
      const std::string keyword = next().text;
      if (keyword == "elif") {
        condition = parse_conditional(false);
        expect_block_end();
        continue;
      }
      expect_block_end();
      if (keyword == "else") {
        n->else_body = parse_body({"endif"});
        end_tag("endif");
      }
      return n;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> targets{expect_name()};
    while (at_op(",")) {
      next();
      targets.push_back(expect_name());
    }
    return targets;
  }

  NodePtr parse_for(const Token& at) {
    auto n = make<Node>(Node::Kind::for_loop, at);
    if (at_op("(")) {
      next();
      n->targets = parse_targets();
      expect_op(")");
    } else {
      n->targets = parse_targets();
    }
    if (!at_name("in")) fail(peek(), "expected 'in' in the for loop, found " + describe(peek()));
    next();
    n->expr = parse_conditional(/*allow_if=*/false);
    if (at_name("if")) {
      next();
      n->filter = parse_conditional(false);
    }
    if (at_name("recursive")) fail(peek(), "recursive for loops are not supported");
    expect_block_end();
    ++loops_;
    n->body = parse_body({"else", "endfor"});
    --loops_;
    if (next().text == "else") {
      expect_block_end();
      n->else_body = parse_body({"endfor"});
      end_tag("endfor");
    } else {
      expect_block_end();
    }
    return n;
  }

  NodePtr parse_set(const Token& at) {
    auto n = make<Node>(Node::Kind::set, at);
    n->targets.push_back(expect_name());
    if (at_op(".")) {  // a namespace's attribute
      next();
      n->text = expect_name();
    } else {
      while (at_op(",")) {
        next();
        n->targets.push_back(expect_name());
      }
    }
    if (at_op("=")) {
      next();
      n->expr = parse_tuple_or_expression();
      expect_block_end();
      return n;
    }
    if (!n->text.empty() || n->targets.size() != 1) fail(peek(), "expected '=' in the set statement");
    n->kind = Node::Kind::set_block;
    if (at_op("|")) n->filter = parse_filters(nullptr);
    expect_block_end();
    n->body = parse_body({"endset"});
    end_tag("endset");
    return n;
  }

  std::vector<std::pair<std::string, ExprPtr>> parse_params() {
    std::vector<std::pair<std::string, ExprPtr>> params;
    expect_op("(");
    while (!at_op(")")) {
      std::string param = expect_name();
      ExprPtr default_value;
      if (at_op("=")) {
        next();
        default_value = parse_expression();
      }
      params.emplace_back(std::move(param), std::move(default_value));
      if (!at_op(",")) break;
      next();
    }
    expect_op(")");
    return params;
  }

  NodePtr parse_macro(const Token& at) {
    auto n = make<Node>(Node::Kind::macro, at);
    n->text = expect_name();
    n->params = parse_params();
    expect_block_end();
    const int loops = std::exchange(loops_, 0);
    n->body = parse_body({"endmacro"});
    loops_ = loops;
    if (!at_name("endmacro")) fail(peek(), "expected 'endmacro'");
    next();
    if (peek().kind == Kind::name) next();  // {% endmacro name %}
    expect_block_end();
    return n;
  }

  NodePtr parse_call(const Token& at) {
    auto n = make<Node>(Node::Kind::call_block, at);
    if (at_op("(")) n->params = parse_params();
    n->expr = parse_expression();
    if (n->expr->kind != Expr::Kind::call) fail(at, "{% call %} needs a macro call");
    expect_block_end();
    n->body = parse_body({"endcall"});
    end_tag("endcall");
    return n;
  }

  NodePtr parse_filter_block(const Token& at) {
    auto n = make<Node>(Node::Kind::filter_block, at);
    n->expr = parse_filters(nullptr, /*first_without_bar=*/true);
    expect_block_end();
    n->body = parse_body({"endfilter"});
    end_tag("endfilter");
    return n;
  }

  // ---- Expressions.
  ExprPtr parse_tuple_or_expression() {
    const Token& at = peek();
    auto first = parse_expression();
    if (!at_op(",")) return first;
    auto tuple = make<Expr>(Expr::Kind::list, at);
    tuple->tuple = true;
    tuple->items.push_back(std::move(first));
    while (at_op(",")) {
      next();
      if (peek().kind == Kind::block_end || peek().kind == Kind::variable_end) break;
      tuple->items.push_back(parse_expression());
    }
    return tuple;
  }

  ExprPtr parse_expression() { return parse_conditional(true); }

  ExprPtr parse_conditional(bool allow_if) {
    Depth depth(*this);
    auto e = parse_or();
    while (allow_if && at_name("if")) {
      const Token& at = next();
      auto cond = make<Expr>(Expr::Kind::conditional, at);
      cond->a = std::move(e);
      cond->b = parse_or();
      if (at_name("else")) {
        next();
        cond->c = parse_conditional(true);
      }
      e = std::move(cond);
    }
    return e;
  }

  ExprPtr binary(Expr::Kind kind, const Token& at, ExprPtr a, ExprPtr b, std::string op = {}) {
    auto e = make<Expr>(kind, at);
    e->a = std::move(a);
    e->b = std::move(b);
    e->name = std::move(op);
    e->op = op_of(e->name);
    return e;
  }
  static Op op_of(const std::string& spelling) {
    static const std::pair<const char*, Op> ops[] = {
        {"+", Op::add}, {"-", Op::sub},  {"*", Op::mul}, {"/", Op::div}, {"//", Op::floordiv}, {"%", Op::mod},
        {"**", Op::pow}, {"~", Op::concat}, {"==", Op::eq}, {"!=", Op::ne}, {"<", Op::lt},     {">", Op::gt},
        {"<=", Op::le}, {">=", Op::ge},  {"in", Op::in}};
    for (const auto& [text, op] : ops) {
      if (spelling == text) return op;
    }
    return Op::none;
  }

  ExprPtr parse_or() {
    auto e = parse_and();
    while (at_name("or")) {
      const Token& at = next();
      e = binary(Expr::Kind::logical_or, at, std::move(e), parse_and());
    }
    return e;
  }
  ExprPtr parse_and() {
    auto e = parse_not();
    while (at_name("and")) {
      const Token& at = next();
      e = binary(Expr::Kind::logical_and, at, std::move(e), parse_not());
    }
    return e;
  }
  ExprPtr parse_not() {
    if (at_name("not")) {
      Depth depth(*this);
      const Token& at = next();
      auto e = make<Expr>(Expr::Kind::logical_not, at);
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    auto e = parse_math1();
    for (;;) {
      const Token& at = peek();
      if (at.kind == Kind::op && (at.text == "==" || at.text == "!=" || at.text == "<" || at.text == "<=" ||
                                  at.text == ">" || at.text == ">=")) {
        next();
        e = binary(Expr::Kind::compare, at, std::move(e), parse_math1(), at.text);
      } else if (at_name("in")) {
        next();
        e = binary(Expr::Kind::compare, at, std::move(e), parse_math1(), "in");
      } else if (at_name("not") && peek(1).kind == Kind::name && peek(1).text == "in") {
        next();
        next();
        e = binary(Expr::Kind::compare, at, std::move(e), parse_math1(), "in");
        e->negated = true;
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_math1() {
    auto e = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& at = next();
      e = binary(Expr::Kind::binary, at, std::move(e), parse_concat(), at.text);
    }
    return e;
  }
  ExprPtr parse_concat() {
    auto e = parse_math2();
    while (at_op("~")) {
      const Token& at = next();
      e = binary(Expr::Kind::binary, at, std::move(e), parse_math2(), "~");
    }
    return e;
  }
  ExprPtr parse_math2() {
    auto e = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& at = next();
      e = binary(Expr::Kind::binary, at, std::move(e), parse_pow(), at.text);
    }
    return e;
  }
  ExprPtr parse_pow() {
    auto e = parse_unary(true);
    while (at_op("**")) {
      const Token& at = next();
      e = binary(Expr::Kind::binary, at, std::move(e), parse_unary(true), "**");
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    Depth depth(*this);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const Token& at = next();
      e = make<Expr>(at.text == "-" ? Expr::Kind::negate : Expr::Kind::plus, at);
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    return with_filter ? parse_filter_tests(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& at = peek();
    if (at.kind == Kind::name) {
      next();
      auto e = make<Expr>(Expr::Kind::literal, at);
      if (at.text == "true" || at.text == "True") e->value = true;
      else if (at.text == "false" || at.text == "False") e->value = false;
      else if (at.text == "none" || at.text == "None") e->value = nullptr;
      else {
        e->kind = Expr::Kind::name;
        e->name = at.text;
      }
      return e;
    }
    if (at.kind == Kind::string) {
      auto e = make<Expr>(Expr::Kind::literal, at);
      std::string text;
      while (peek().kind == Kind::string) text += next().text;  // adjacent strings join
      e->value = text;
      return e;
    }
    if (at.kind == Kind::integer || at.kind == Kind::real) {
      next();
      auto e = make<Expr>(Expr::Kind::literal, at);
      try {
        e->value = at.kind == Kind::integer ? Value(static_cast<int64_t>(std::stoll(at.text))) : Value(std::stod(at.text));
      } catch (const std::exception&) {
        fail(at, "the number " + at.text + " is out of range");
      }
      return e;
    }
    if (at_op("(")) {
      next();
      if (at_op(")")) {
        next();
        auto empty = make<Expr>(Expr::Kind::list, at);
        empty->tuple = true;
        return empty;
      }
      auto e = parse_expression();
      if (at_op(",")) {
        auto tuple = make<Expr>(Expr::Kind::list, at);
        tuple->tuple = true;
        tuple->items.push_back(std::move(e));
        while (at_op(",")) {
          next();
          if (at_op(")")) break;
          tuple->items.push_back(parse_expression());
        }
        e = std::move(tuple);
      }
      expect_op(")");
      return e;
    }
    if (at_op("[")) {
      next();
      auto e = make<Expr>(Expr::Kind::list, at);
      while (!at_op("]")) {
        e->items.push_back(parse_expression());
        if (!at_op(",")) break;
        next();
      }
      expect_op("]");
      return e;
    }
    if (at_op("{")) {
      next();
      auto e = make<Expr>(Expr::Kind::dict, at);
      while (!at_op("}")) {
        e->items.push_back(parse_expression());
        expect_op(":");
        e->items.push_back(parse_expression());
        if (!at_op(",")) break;
        next();
      }
      expect_op("}");
      return e;
    }
    fail(at, "expected an expression, found " + describe(at));
  }

  void parse_call_arguments(Expr& call) {
    expect_op("(");
    while (!at_op(")")) {
      if (peek().kind == Kind::name && peek(1).kind == Kind::op && peek(1).text == "=") {
        std::string key = next().text;
        next();
        call.keywords.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.keywords.empty()) fail(peek(), "a positional argument follows a keyword argument");
        call.items.push_back(parse_expression());
      }
      if (!at_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      const Token& at = peek();
      if (at_op(".")) {
        next();
        auto a = make<Expr>(Expr::Kind::attribute, at);
        if (peek().kind == Kind::integer) {  // x.0 is x[0]
          a->kind = Expr::Kind::subscript;
          a->b = make<Expr>(Expr::Kind::literal, peek());
          a->b->value = static_cast<int64_t>(std::stoll(next().text));
        } else {
          a->name = expect_name();
        }
        a->a = std::move(e);
        e = std::move(a);
      } else if (at_op("[")) {
        next();
        auto s = make<Expr>(Expr::Kind::subscript, at);
        s->a = std::move(e);
        ExprPtr parts[3];
        int part = 0;
        bool slice = false;
        while (!at_op("]")) {
          if (at_op(":")) {
            next();
            slice = true;
            if (++part > 2) fail(peek(), "a slice has at most three parts");
            continue;
          }
          parts[part] = parse_expression();
          if (!slice && !at_op(":")) break;
        }
        expect_op("]");
        if (slice) {
          s->kind = Expr::Kind::slice;
          for (auto& p : parts) s->items.push_back(std::move(p));
        } else {
          if (!parts[0]) {  // x[] is x[()] to jinja2: nothing is found under the empty tuple
            parts[0] = make<Expr>(Expr::Kind::literal, at);
            parts[0]->value = Value::tuple({});
          }
          s->b = std::move(parts[0]);
        }
        e = std::move(s);
      } else if (at_op("(")) {
        auto call = make<Expr>(Expr::Kind::call, at);
        call->a = std::move(e);
        parse_call_arguments(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  // `| filter(args)` chains, `is [not] test(args)` and calls after them.
  ExprPtr parse_filter_tests(ExprPtr e) {
    for (;;) {
      if (at_op("|")) {
        e = parse_filters(std::move(e));
      } else if (at_name("is")) {
        const Token& at = next();
        auto test = make<Expr>(Expr::Kind::test, at);
        test->a = std::move(e);
        if (at_name("not")) {
          next();
          test->negated = true;
        }
        test->name = expect_name();
        if (at_op("(")) {
          parse_call_arguments(*test);
        } else if (at_op("[") || at_op("{") || peek().kind == Kind::string || peek().kind == Kind::integer ||
                   peek().kind == Kind::real ||
                   (peek().kind == Kind::name && !at_name("else") && !at_name("or") && !at_name("and"))) {
          // One argument without parentheses, as jinja2 takes it: `x is divisibleby 3`, `x is in [1, 2]`;
          // any other name is that argument too (`x is sameas in` looks up a variable `in`).
          if (at_name("is")) fail(peek(), "you cannot chain multiple tests with 'is' (write 'x is a and x is b')");
          test->items.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(test);
      } else if (at_op("(") && e->kind == Expr::Kind::filter) {
        auto call = make<Expr>(Expr::Kind::call, peek());
        call->a = std::move(e);
        parse_call_arguments(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  // One or more `| name(args)` on `input` (null: a filter block's body, or a set block's).
  ExprPtr parse_filters(ExprPtr input, bool first_without_bar = false) {
    bool first = true;
    while (at_op("|") || (first && first_without_bar)) {
      if (!(first && first_without_bar)) next();
      first = false;
      const Token& at = peek();
      auto f = make<Expr>(Expr::Kind::filter, at);
      f->name = expect_name();
      while (at_op(".")) {  // dotted filter names
        next();
        f->name += '.';
        f->name += expect_name();
      }
      if (at_op("(")) parse_call_arguments(*f);
      f->a = std::move(input);
      input = std::move(f);
    }
    return input;
  }

  const std::vector<Token>& t_;
  const std::string& name_;
  size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& name) { return Parser(tokens, name).parse_all(); }

}  // namespace superoffload::jinja
