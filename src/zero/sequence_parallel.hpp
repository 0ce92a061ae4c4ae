// Ulysses sequence parallelism, the engine's side: the groups of consecutive ranks that share
// rows (rank r is in group r / P at position r % P, so a group sits within a node whenever P
// divides the ranks per node, and its exchanges stay on NVLink), a communicator per group,
// the shard of each row a rank keeps, and the exchanges (model::SequenceParallelGroup) that
// attention makes through it. ZeRO-3 keeps partitioning over every rank; data parallelism
// runs over the world / P groups.
#pragma once

#include <mpi.h>

#include <ATen/ATen.h>

#include <memory>

#include "comm/communicator.hpp"
#include "config/choices.hpp"
#include "model/sequence_parallel.hpp"

namespace superoffload::zero {

class SequenceParallel final : public model::SequenceParallelGroup {
 public:
  // Collective over `world`: splits it into groups of `size` consecutive ranks (size must
  // divide the world) and builds each group's communicator for `device` (NCCL or MPI as the
  // engine's, per `backend`).
  SequenceParallel(MPI_Comm world, int size, config::CommBackend backend, at::Device device);
  // Over an existing group communicator (tests).
  explicit SequenceParallel(std::unique_ptr<comm::Communicator> group);

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  at::Tensor all_to_all(const at::Tensor& send) const override;

  // This rank's shard of rows [batch, seq, ...] (dim 1; seq divisible by size()): a view.
  at::Tensor shard(const at::Tensor& rows) const;
  // The mean over the group, in place (the MoE routers' statistics, which HF pools over a
  // forward's tokens: each rank has its shard's).
  void average(at::Tensor& values) const;
  comm::Communicator& communicator() const { return *group_; }

 private:
  std::unique_ptr<comm::Communicator> group_;
};

}  // namespace superoffload::zero
