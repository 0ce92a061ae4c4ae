// This process's place in MPI_COMM_WORLD, for the MPI tests.
#pragma once

#include <mpi.h>

namespace superoffload::testing {

inline int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

}  // namespace superoffload::testing
