// Communicator selection.
#include "zero/communicator_factory.hpp"

#include "base/build_config.hpp"
#include "base/error.hpp"
#include "cluster/check_mpi.hpp"
#include "comm/mpi_communicator.hpp"

#if SUPEROFFLOAD_WITH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "comm/nccl_communicator.hpp"
#endif

namespace superoffload::zero {

std::unique_ptr<comm::Communicator> make_communicator(config::CommBackend backend, at::Device device, MPI_Comm comm) {
  using config::CommBackend;
  const bool cuda = device.is_cuda();
  const auto chosen = backend == CommBackend::automatic ? (cuda ? CommBackend::nccl : CommBackend::mpi) : backend;
  if (chosen == CommBackend::mpi) {
    SO_CHECK(!cuda, "[runtime] comm_backend = \"mpi\" cannot work on GPU buffers (device " << device.str() << ")"
                                                                                         << hint("use comm_backend = \"nccl\" or \"auto\""));
    return std::make_unique<comm::MpiCommunicator>(comm);
  }
  SO_CHECK(cuda, "[runtime] comm_backend = \"nccl\" needs a CUDA device, but the engine runs on " << device.str()
                                                                                            << hint("use comm_backend = \"mpi\" or \"auto\" on the CPU"));
#if SUPEROFFLOAD_WITH_CUDA
  const int index = device.index();
  return std::make_unique<comm::NcclCommunicator>(
      comm, index, [index] { return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index)).stream(); });
#else
  SO_FAIL("this superoffload was built without the CUDA/NCCL path" << hint("rebuild with -DSUPEROFFLOAD_CUDA=ON"));
#endif
}

std::unique_ptr<comm::Communicator> make_split_communicator(config::CommBackend backend, at::Device device,
                                                            MPI_Comm world, int color, int key) {
  MPI_Comm split = MPI_COMM_NULL;
  SO_CHECK_MPI(MPI_Comm_split(world, color, key, &split));
  std::unique_ptr<comm::Communicator> made;
  try {
    made = make_communicator(backend, device, split);  // duplicates `split`
  } catch (...) {
    MPI_Comm_free(&split);
    throw;
  }
  SO_CHECK_MPI(MPI_Comm_free(&split));
  return made;
}

}  // namespace superoffload::zero
