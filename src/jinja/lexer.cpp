// tokenize.
#include "jinja/lexer.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "jinja/template_error.hpp"
#include "jinja/unicode_chars.hpp"

namespace superoffload::jinja {

namespace {

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 where the bytes there are not one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const unsigned c = byte(0);
  const auto tail = [&](size_t k) { return (byte(k) & 0xC0u) == 0x80u; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return tail(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return byte(1) >= lo && byte(1) <= hi && tail(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return byte(1) >= lo && byte(1) <= hi && tail(2) && tail(3) ? 4 : 0;
  }
  return 0;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name, const LexOptions& options)
      : src_(source), name_(name), options_(options) {}

  std::vector<Token> run() {
    check_utf8();
    bool strip_next = false;    // the previous tag ended with '-'
    bool trim_newline = false;  // the previous tag was a block or comment (trim_blocks)
    while (pos_ < src_.size()) {
      const size_t chunk_start = pos_, open = find_tag(pos_);
      std::string text(src_.substr(pos_, open - pos_));
      const int text_line = line_, text_column = column_;
      if (strip_next) {
        text.erase(0, text.find_first_not_of(" \t\r\n\f\v") == std::string::npos ? text.size()
                                                                               : text.find_first_not_of(" \t\r\n\f\v"));
      } else if (trim_newline && options_.trim_blocks) {
        if (text.rfind("\r\n", 0) == 0) text.erase(0, 2);
        else if (text.rfind("\n", 0) == 0) text.erase(0, 1);
      }
      advance_to(open);
      if (open >= src_.size()) {
        emit_text(std::move(text), text_line, text_column);
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (modifier == '-') {
        const auto last = text.find_last_not_of(" \t\r\n\f\v");
        text.erase(last == std::string::npos ? 0 : last + 1);
      } else if (kind != '{' && options_.lstrip_blocks && modifier != '+') {
        // A tag with only spaces and tabs before it on its line (in the source, whatever
        // trim_blocks or '-' took from the text already) loses them.
        size_t k = open;
        while (k > chunk_start && (src_[k - 1] == ' ' || src_[k - 1] == '\t')) --k;
        if (k == 0 || src_[k - 1] == '\n') text.erase(text.size() - std::min(open - k, text.size()));
      }
      emit_text(std::move(text), text_line, text_column);
      const int tag_line = line_, tag_column = column_;
      advance(2 + ((modifier == '-' || modifier == '+') ? 1 : 0));
      if (kind == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string_view::npos) fail(tag_line, tag_column, "a comment {# is never closed with #}");
        strip_next = close > 0 && src_[close - 1] == '-';
        advance_to(close + 2);
        trim_newline = true;
      } else {
        const bool block = kind == '%';
        tokens_.push_back({block ? Token::Kind::block_begin : Token::Kind::variable_begin, "", tag_line, tag_column});
        strip_next = lex_inside(block ? '%' : '}', tag_line, tag_column);
        tokens_.push_back({block ? Token::Kind::block_end : Token::Kind::variable_end, "", close_line_, close_column_});
        trim_newline = block;
        if (block && is_raw()) lex_raw(strip_next, trim_newline);
      }
    }
    tokens_.push_back({Token::Kind::end, "", line_, column_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }
  void advance(size_t n) {
    for (size_t i = 0; i < n && pos_ < src_.size(); ++i, ++pos_) {
      if (src_[pos_] == '\n') {
        ++line_;
        column_ = 1;
      } else {
        ++column_;
      }
    }
  }
  void advance_to(size_t target) {
    if (target > pos_) advance(target - pos_);
  }
  void emit_text(std::string text, int line, int column) {
    if (!text.empty()) tokens_.push_back({Token::Kind::text, std::move(text), line, column});
  }
  // jinja2 takes text (HF reads a template as UTF-8); bytes that are not UTF-8 are refused
  // here, so no rendered text or error message carries them on.
  void check_utf8() const {
    int line = 1, column = 1;
    for (size_t i = 0; i < src_.size();) {
      const size_t n = utf8_length(src_, i);
      if (n == 0) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(src_[i]));
        fail(line, column, std::string("the template is not valid UTF-8 (byte ") + hex + "); save it as UTF-8");
      }
      if (src_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        column += static_cast<int>(n);  // columns count bytes, as the lexer's do
      }
      i += n;
    }
  }
  [[noreturn]] void fail(int line, int column, const std::string& what) const {
    throw TemplateError(name_ + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + what);
  }

  // The tokens of one tag up to its closing `%}` or `}}`; returns whether it was `-%}` / `-}}`.
  bool lex_inside(char closing, int tag_line, int tag_column) {
    for (;;) {
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) advance(1);
      if (pos_ >= src_.size()) {
        fail(tag_line, tag_column, std::string("a tag is never closed with ") + (closing == '%' ? "%}" : "}}"));
      }
      const char c = src_[pos_];
      auto at = [&](std::string_view s) { return src_.substr(pos_, s.size()) == s; };
      close_line_ = line_;
      close_column_ = column_;
      if (at(std::string("-") + closing + "}") && closing == '%') {
        advance(3);
        return true;
      }
      if (closing == '}' && at("-}}")) {
        advance(3);
        return true;
      }
      if (at(std::string(1, closing) + "}")) {
        advance(2);
        return false;
      }
      const int line = line_, column = column_;
      if (const size_t length = identifier_length(src_, pos_)) {
        tokens_.push_back({Token::Kind::name, std::string(src_.substr(pos_, length)), line, column});
        advance(length);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t end = pos_;
        bool real = false;
        while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
        if (end + 1 < src_.size() && src_[end] == '.' && std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
          real = true;
          ++end;
          while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
        }
        if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
          size_t e = end + 1;
          if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
          if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
            real = true;
            end = e;
            while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
          }
        }
        std::string number;
        for (char d : src_.substr(pos_, end - pos_)) {
          if (d != '_') number += d;
        }
        tokens_.push_back({real ? Token::Kind::real : Token::Kind::integer, number, line, column});
        advance_to(end);
      } else if (c == '"' || c == '\'') {
        tokens_.push_back({Token::Kind::string, lex_string(c), line, column});
      } else {
        static const char* const kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                                 ">", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "="};
        bool found = false;
        for (const char* op : kOperators) {
          if (at(op)) {
            tokens_.push_back({Token::Kind::op, op, line, column});
            advance(std::string_view(op).size());
            found = true;
            break;
          }
        }
        if (!found) fail(line, column, "unexpected character '" + std::string(src_.substr(pos_, utf8_length(src_, pos_))) + "'");
      }
    }
  }

  // A quoted string with Python's escapes.
  std::string lex_string(char quote) {
    const int line = line_, column = column_;
    advance(1);
    std::string out;
    while (pos_ < src_.size() && src_[pos_] != quote) {
      char c = src_[pos_];
      if (c == '\\' && pos_ + 1 < src_.size()) {
        const char e = src_[pos_ + 1];
        advance(2);
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case '0': out += '\0'; break;
          case '\\': out += '\\'; break;
          case '\'': out += '\''; break;
          case '"': out += '"'; break;
          case '\n': break;
          case 'u':
          case 'x': {
            const size_t digits = e == 'u' ? 4 : 2;
            if (pos_ + digits > src_.size()) fail(line, column, "a truncated escape in a string");
            const auto code = std::stoul(std::string(src_.substr(pos_, digits)), nullptr, 16);
            advance(digits);
            append_utf8(out, static_cast<uint32_t>(code));
            break;
          }
          default: out += '\\'; out += e;  // Python keeps unknown escapes as written
        }
        continue;
      }
      out += c;
      advance(1);
    }
    if (pos_ >= src_.size()) fail(line, column, "a string is never closed");
    advance(1);
    return out;
  }

  static void append_utf8(std::string& out, uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  // The last tag was {% raw %}: everything to {% endraw %} is text.
  bool is_raw() const {
    const size_t n = tokens_.size();
    return n >= 3 && tokens_[n - 3].kind == Token::Kind::block_begin && tokens_[n - 2].kind == Token::Kind::name &&
           tokens_[n - 2].text == "raw";
  }
  void lex_raw(bool& strip_next, bool& trim_newline) {
    const auto begin_line = tokens_[tokens_.size() - 3].line, begin_column = tokens_[tokens_.size() - 3].column;
    tokens_.resize(tokens_.size() - 3);
    size_t search = pos_;
    for (;;) {
      const size_t open = src_.find("{%", search);
      if (open == std::string_view::npos) fail(begin_line, begin_column, "{% raw %} is never closed with {% endraw %}");
      size_t i = open + 2;
      if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
      while (i < src_.size() && std::isspace(static_cast<unsigned char>(src_[i]))) ++i;
      if (src_.substr(i, 6) == "endraw") {
        std::string text(src_.substr(pos_, open - pos_));
        if (strip_next) text.erase(0, text.find_first_not_of(" \t\r\n"));
        if (src_[open + 2] == '-') text.erase(text.find_last_not_of(" \t\r\n") + 1);
        emit_text(text, line_, column_);
        advance_to(i + 6);
        while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) advance(1);
        strip_next = src_.substr(pos_, 3) == "-%}";
        if (!strip_next && src_.substr(pos_, 2) != "%}") fail(line_, column_, "expected %} after endraw");
        advance(strip_next ? 3 : 2);
        trim_newline = true;
        return;
      }
      search = open + 2;
    }
  }

  std::string_view src_;
  const std::string& name_;
  LexOptions options_;
  size_t pos_ = 0;
  int line_ = 1, column_ = 1;
  int close_line_ = 1, close_column_ = 1;  // where the last tag's closing delimiter starts
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& name, const LexOptions& options) {
  return Lexer(source, name, options).run();
}

}  // namespace superoffload::jinja
