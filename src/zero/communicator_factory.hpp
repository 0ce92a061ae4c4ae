// Choosing the collective backend for the engine's device: NCCL for CUDA, MPI for the CPU,
// overridable by [runtime] comm_backend. MPI is never used on GPU buffers.
#pragma once

#include <mpi.h>

#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "comm/communicator.hpp"

namespace superoffload::zero {

// `backend` is "auto", "mpi" or "nccl". Throws with a hint when the combination cannot work.
std::unique_ptr<comm::Communicator> make_communicator(const std::string& backend, at::Device device, MPI_Comm comm);

}  // namespace superoffload::zero
