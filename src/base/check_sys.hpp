// Checks for POSIX calls that return -1 (or a null pointer) and set errno.
#pragma once

#include <string>

#include "base/error.hpp"

namespace superoffload::detail {
// "No such file or directory (errno 2)" plus a hint chosen by errno.
std::string describe_errno(int err, std::string* hint);
}  // namespace superoffload::detail

// SO_CHECK_SYS(::open(path, O_RDONLY), "opening " << path): fails when the call returns -1.
#define SO_CHECK_SYS(call, ...)                                                         \
  do {                                                                                  \
    if ((call) == -1) [[unlikely]] {                                                    \
      const int so_errno_ = errno;                                                      \
      std::string so_hint_;                                                             \
      const std::string so_desc_ = ::superoffload::detail::describe_errno(so_errno_, &so_hint_); \
      SO_FAIL(__VA_ARGS__ << ": " #call " failed: " << so_desc_ << ::superoffload::hint(so_hint_)); \
    }                                                                                   \
  } while (0)
