// SequenceParallel.
#include "zero/sequence_parallel.hpp"

#include "base/error.hpp"
#include "cluster/check_mpi.hpp"
#include "zero/communicator_factory.hpp"
#include "zero/partitioned_layer.hpp"

namespace superoffload::zero {

SequenceParallel::SequenceParallel(MPI_Comm world, int size, config::CommBackend backend, at::Device device) {
  int world_rank = 0, world_size = 0;
  SO_CHECK_MPI(MPI_Comm_rank(world, &world_rank));
  SO_CHECK_MPI(MPI_Comm_size(world, &world_size));
  SO_CHECK(size >= 1 && world_size % size == 0,
           "[parallel] sequence_parallel_size = " << size << " does not divide the world size " << world_size);
  group_ = make_split_communicator(backend, device, world, world_rank / size, world_rank);
  SO_CHECK(group_->size() == size && group_->rank() == world_rank % size,
           "sequence-parallel group of rank " << world_rank << ": rank " << group_->rank() << " of " << group_->size()
                                              << ", expected " << world_rank % size << " of " << size);
}

SequenceParallel::SequenceParallel(std::unique_ptr<comm::Communicator> group) : group_(std::move(group)) {}

at::Tensor SequenceParallel::all_to_all(const at::Tensor& send) const {
  const int p = size();
  SO_CHECK(send.is_contiguous() && send.dim() >= 1 && send.size(0) == p,
           "all_to_all: a contiguous [" << p << ", ...] tensor expected, not " << send.sizes());
  auto recv = at::empty_like(send);
  const size_t block = static_cast<size_t>(send.numel() / p);
  std::vector<size_t> counts(static_cast<size_t>(p), block), offsets(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) offsets[static_cast<size_t>(r)] = block * static_cast<size_t>(r);
  group_->all_to_all(send.data_ptr(), counts, offsets, recv.data_ptr(), counts, offsets, comm_type(send.scalar_type()))
      ->wait();
  return recv;
}

at::Tensor SequenceParallel::shard(const at::Tensor& rows) const {
  if (!rows.defined() || size() == 1) return rows;
  const int64_t seq = rows.size(1);
  SO_CHECK(seq % size() == 0, "a row of " << seq << " tokens does not divide among " << size()
                                          << " sequence-parallel ranks" << hint("make [data] seq_len a multiple of "
                                                                                 "[parallel] sequence_parallel_size"));
  const int64_t part = seq / size();
  return rows.narrow(1, rank() * part, part);
}

void SequenceParallel::average(at::Tensor& values) const {
  if (size() == 1) return;
  SO_CHECK(values.is_contiguous(), "average: a contiguous tensor expected");
  group_->all_reduce(values.data_ptr(), static_cast<size_t>(values.numel()), comm_type(values.scalar_type()),
                     comm::ReduceOp::avg)
      ->wait();
}

}  // namespace superoffload::zero
