// Check for MPI calls: decodes the error code with MPI_Error_string.
#pragma once

#include <mpi.h>

#include <string>

#include "base/error.hpp"

namespace superoffload::detail {
std::string describe_mpi_error(int code);
inline constexpr const char* kMpiHint =
    "an MPI error often follows a failure on another rank: look for the first error in "
    "<output_dir>/logs/rank_*.log";
}  // namespace superoffload::detail

#define SO_CHECK_MPI(call)                                                              \
  do {                                                                                  \
    if (const int so_rc_ = (call); so_rc_ != MPI_SUCCESS) [[unlikely]] {                \
      SO_FAIL("MPI call " #call " failed: " << ::superoffload::detail::describe_mpi_error(so_rc_) \
              << ::superoffload::hint(::superoffload::detail::kMpiHint));               \
    }                                                                                   \
  } while (0)
