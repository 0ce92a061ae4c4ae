// Error formatting: the source location is reported relative to the project tree.
#include "base/error.hpp"

#include <string_view>

namespace superoffload {
namespace {

std::string short_location(const std::source_location& where) {
  std::string_view file = where.file_name();
  // Report "src/…" rather than the absolute path of the build machine.
  for (const std::string_view folder : {"/src/", "/include/", "/plugins/"}) {
    if (auto pos = file.rfind(folder); pos != std::string_view::npos) {
      file.remove_prefix(pos + 1);
      break;
    }
  }
  return std::string(file) + ":" + std::to_string(where.line());
}

}  // namespace

Error::Error(const std::string& what, std::string hint, std::source_location where)
    : std::runtime_error(what), hint_(std::move(hint)), where_(short_location(where)) {}

Error::Error(const std::string& what, std::string hint, UserInput)
    : std::runtime_error(what), hint_(std::move(hint)) {}

std::string Error::describe() const {
  std::string out = what();
  if (!where_.empty()) out += "\n  at " + where_;
  if (!hint_.empty()) out += "\n  HINT: " + hint_;
  return out;
}

namespace detail {

void raise(const Message& message, std::source_location where) {
  throw Error(message.text(), message.hint(), where);
}

}  // namespace detail
}  // namespace superoffload
