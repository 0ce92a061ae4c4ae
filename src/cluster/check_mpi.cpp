// MPI error decoding.
#include "cluster/check_mpi.hpp"

namespace superoffload::detail {

std::string describe_mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length)) + " (code " + std::to_string(code) + ")";
}

}  // namespace superoffload::detail
