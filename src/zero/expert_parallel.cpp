// ExpertParallel.
#include "zero/expert_parallel.hpp"

#include <numeric>

#include "base/error.hpp"
#include "cluster/check_mpi.hpp"
#include "zero/communicator_factory.hpp"
#include "zero/partitioned_layer.hpp"

namespace superoffload::zero {
ExpertParallel::ExpertParallel(MPI_Comm world, int size, config::CommBackend backend, at::Device device) {
  int world_rank = 0, world_size = 0;
  SO_CHECK_MPI(MPI_Comm_rank(world, &world_rank));
  SO_CHECK_MPI(MPI_Comm_size(world, &world_size));
  SO_CHECK(size >= 1 && world_size % size == 0,
           "[moe] expert_parallel_size = " << size << " does not divide the world size " << world_size);
  group_ = make_split_communicator(backend, device, world, world_rank / size, world_rank);
  replicas_ = make_split_communicator(backend, device, world, world_rank % size, world_rank);
  SO_CHECK(group_->size() == size && group_->rank() == world_rank % size && replicas_->size() == world_size / size &&
               replicas_->rank() == world_rank / size,
           "expert-parallel groups of rank " << world_rank << ": position " << group_->rank() << " of "
                                             << group_->size() << ", replica " << replicas_->rank() << " of "
                                             << replicas_->size());
}

ExpertParallel::ExpertParallel(std::unique_ptr<comm::Communicator> group, std::unique_ptr<comm::Communicator> replicas)
    : group_(std::move(group)), replicas_(std::move(replicas)) {}

at::Tensor ExpertParallel::exchange_rows(const at::Tensor& send, const std::vector<int64_t>& send_counts,
                                         const std::vector<int64_t>& recv_counts) const {
  const auto p = static_cast<size_t>(size());
  SO_CHECK(send.is_contiguous() && send.dim() >= 1 && send_counts.size() == p && recv_counts.size() == p,
           "exchange_rows: a contiguous [rows, ...] tensor and " << p << " counts each way expected");
  auto shape = send.sizes().vec();
  int64_t row = 1;
  for (size_t d = 1; d < shape.size(); ++d) row *= shape[d];
  shape[0] = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  auto recv = at::empty(shape, send.options());
  std::vector<size_t> sc(p), so(p), rc(p), ro(p);
  size_t sent = 0, received = 0;
  for (size_t r = 0; r < p; ++r) {
    sc[r] = static_cast<size_t>(send_counts[r] * row);
    rc[r] = static_cast<size_t>(recv_counts[r] * row);
    so[r] = sent;
    ro[r] = received;
    sent += sc[r];
    received += rc[r];
  }
  SO_CHECK(sent == static_cast<size_t>(send.numel()),
           "exchange_rows: the send counts cover " << sent << " of " << send.numel() << " elements");
  group_->all_to_all(send.data_ptr(), sc, so, recv.data_ptr(), rc, ro, comm_type(send.scalar_type()))->wait();
  return recv;
}

}  // namespace superoffload::zero
