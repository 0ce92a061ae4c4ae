// The one error of the template engine: what went wrong, and where in which template
// ("chat_template.jinja:12:5"), filled in by the parser and the renderer as it unwinds.
#pragma once

#include <string>

#include "base/error.hpp"

namespace superoffload::jinja {

class TemplateError : public Error {
 public:
  explicit TemplateError(const std::string& what, std::string hint = {}) : Error(what, std::move(hint), UserInput{}) {}
};

// raise_exception(message) in a template: the template refuses its input (a role out of
// order, a system message it does not support). Not a fault of the template.
class RaisedException : public TemplateError {
 public:
  explicit RaisedException(const std::string& message) : TemplateError(message) {}
};

}  // namespace superoffload::jinja
