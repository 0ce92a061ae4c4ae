// Collectives on host buffers through MPI's non-blocking collectives. bf16 and f16 are
// reduced in fp32 (converted on the way in and out) so that sums over many ranks do not lose
// precision; avg divides the fp32 sum by the world size.
#pragma once

#include <mpi.h>

#include "comm/communicator.hpp"

namespace superoffload::comm {

// Communicator::all_reduce_host on `comm`, shared by both backends.
void all_reduce_host_over_mpi(MPI_Comm comm, double* values, size_t count, ReduceOp op);

class MpiCommunicator : public Communicator {
 public:
  // Uses a duplicate of `comm`, so its traffic never matches anyone else's.
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

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
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace superoffload::comm
