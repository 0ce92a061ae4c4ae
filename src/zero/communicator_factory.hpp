// Choosing the collective backend for the engine's device: NCCL for CUDA, MPI for the CPU,
// overridable by [runtime] comm_backend. MPI is never used on GPU buffers.
#pragma once

#include <mpi.h>

#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "config/choices.hpp"

namespace superoffload::zero {

// Throws with a hint when the combination cannot work.
std::unique_ptr<comm::Communicator> make_communicator(config::CommBackend backend, at::Device device, MPI_Comm comm);

// The same over the ranks of `world` that pass the same `color` (MPI_Comm_split, ordered by
// `key`): the groups of sequence and expert parallelism. Collective over `world`.
std::unique_ptr<comm::Communicator> make_split_communicator(config::CommBackend backend, at::Device device,
                                                            MPI_Comm world, int color, int key);

}  // namespace superoffload::zero
