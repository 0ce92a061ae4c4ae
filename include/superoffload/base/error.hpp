// The one error type every part throws: what failed, where in our code, and what to do.
#pragma once

#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>

namespace superoffload {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string hint = {},
                 std::source_location where = std::source_location::current());
  // Errors in what the user gave (configuration, arguments): our source location would
  // only distract, so none is reported.
  struct UserInput {};
  Error(const std::string& what, std::string hint, UserInput);

  const std::string& hint() const noexcept { return hint_; }
  // "src/cluster/binding.cpp:42", relative to the source tree; empty for user-input errors.
  const std::string& where() const noexcept { return where_; }
  // Message, then "  at <where>" and "  HINT: <hint>" lines: what the user is shown.
  std::string describe() const;

 private:
  std::string hint_;
  std::string where_;
};

namespace detail {

struct Hint {
  std::string text;
};

// Collects a streamed message; a Hint streamed into it becomes the error's hint.
class Message {
 public:
  template <class T>
  Message& operator<<(const T& value) {
    text_ << value;
    return *this;
  }
  Message& operator<<(const Hint& h) {
    hint_ = h.text;
    return *this;
  }
  std::string text() const { return text_.str(); }
  const std::string& hint() const { return hint_; }

 private:
  std::ostringstream text_;
  std::string hint_;
};

[[noreturn]] void raise(const Message& message, std::source_location where);

}  // namespace detail

// Streamed into an error message: `SO_FAIL("bad x " << x << hint("set y"))`.
inline detail::Hint hint(std::string text) { return detail::Hint{std::move(text)}; }

}  // namespace superoffload

// Throws superoffload::Error with a streamed message; `hint(...)` may be streamed in.
#define SO_FAIL(...) \
  ::superoffload::detail::raise((::superoffload::detail::Message{} << __VA_ARGS__), \
                                std::source_location::current())

#define SO_CHECK(cond, ...)           \
  do {                                \
    if (!(cond)) [[unlikely]] {       \
      SO_FAIL(__VA_ARGS__);           \
    }                                 \
  } while (0)
