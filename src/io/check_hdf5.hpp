// Check for HDF5 calls (negative herr_t / hid_t): reports the innermost messages of the
// HDF5 error stack instead of letting HDF5 print its own trace.
#pragma once

#include <hdf5.h>

#include <string>

#include "base/error.hpp"

namespace superoffload::detail {
// Collects and clears the current thread's HDF5 error stack.
std::string describe_hdf5_error_stack();
// Once per process, before any other HDF5 call: turns off HDF5's automatic stack printing (our
// checks report the stack instead), and its exit handler. That handler closes whatever is
// still open, and on a file whose writes failed (a full disk) HDF5 1.10 crashes doing so,
// turning a clean error exit into SIGSEGV; every file here is closed by its owner instead.
void configure_hdf5();
inline constexpr const char* kHdf5Hint =
    "check the path, permissions and free space; on Lustre/GPFS without flock support set "
    "HDF5_USE_FILE_LOCKING=FALSE";
}  // namespace superoffload::detail

#define SO_CHECK_HDF5(call, ...)                                                        \
  ([&]() {                                                                              \
    auto so_rc_ = (call);                                                               \
    if (so_rc_ < 0) [[unlikely]] {                                                      \
      SO_FAIL(__VA_ARGS__ << ": HDF5 call " #call " failed: "                           \
              << ::superoffload::detail::describe_hdf5_error_stack()                    \
              << ::superoffload::hint(::superoffload::detail::kHdf5Hint));              \
    }                                                                                   \
    return so_rc_;                                                                      \
  }())
