// Collectives on device buffers through NCCL, on a stream of their own. Ordering with
// compute uses CUDA events only: a collective waits for the work queued on the compute
// stream before it, and Work::wait() makes the compute stream wait for the collective. The
// host never blocks to order them. The communicator is created from an ncclUniqueId that
// the first rank of `mpi_comm` broadcasts over MPI. Compiled only with the CUDA path.
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <functional>

#include "comm/communicator.hpp"

namespace superoffload::comm {

class NcclCommunicator : public Communicator {
 public:
  // `device`: the CUDA device of this rank. `compute_stream`: the stream compute runs on now
  // (LibTorch's current stream, supplied by the caller so this file stays free of LibTorch).
  NcclCommunicator(MPI_Comm mpi_comm, int device, std::function<cudaStream_t()> compute_stream);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  std::unique_ptr<Work> all_gather(const void* send, void* recv, size_t count, DataType type) override;
  std::unique_ptr<Work> reduce_scatter(const void* send, void* recv, size_t count, DataType type,
                                       ReduceOp op) override;
  std::unique_ptr<Work> all_reduce(void* data, size_t count, DataType type, ReduceOp op) override;
  std::unique_ptr<Work> broadcast(void* data, size_t count, DataType type, int root) override;
  std::unique_ptr<Work> all_to_all(const void* send, const std::vector<size_t>& send_counts,
                                   const std::vector<size_t>& send_offsets, void* recv,
                                   const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_offsets,
                                   DataType type) override;
  void barrier() override;
  void all_reduce_host(double* values, size_t count, ReduceOp op) override;

 private:
  // Makes the communication stream wait for the compute stream; returns a Work that makes
  // the compute stream wait for what is enqueued after this call once `launch` ran.
  std::unique_ptr<Work> run(const std::function<void(cudaStream_t)>& launch);

  MPI_Comm host_comm_ = MPI_COMM_NULL;  // a duplicate of mpi_comm, for all_reduce_host
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int device_ = 0, rank_ = 0, size_ = 1;
  std::function<cudaStream_t()> compute_stream_;
};

}  // namespace superoffload::comm
