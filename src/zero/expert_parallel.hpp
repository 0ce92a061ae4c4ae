// Expert parallelism, the engine's side ([moe] expert_parallel_size, DeepSpeed's ep_size,
// Megatron's --expert-model-parallel-size). The world splits into groups of P consecutive
// ranks (rank r is in group r / P at position r % P, so a group sits within a node whenever P
// divides the ranks per node and its all-to-all stays on NVLink); position q computes experts
// [q·E/P, (q+1)·E/P) of every MoE layer (model::local_experts). The W / P ranks at the same
// position in every group hold the same experts: they are the experts' data-parallel replicas
// (ranks q, q+P, q+2P, …), and ZeRO-3 partitions those experts' parameters, gradients and
// optimizer state across them alone, while the layers' other parameters stay partitioned
// across every rank (zero/partitioned_layer.hpp). No rank ever gathers an expert it does not
// compute.
#pragma once

#include <mpi.h>

#include <ATen/ATen.h>

#include <memory>

#include "comm/communicator.hpp"
#include "config/choices.hpp"
#include "model/expert_parallel.hpp"

namespace superoffload::zero {

class ExpertParallel final : public model::ExpertParallelGroup {
 public:
  // Collective over `world`: `size` must divide the world size. Builds the group's and the
  // replicas' communicators for `device` (NCCL or MPI as the engine's, per `backend`).
  ExpertParallel(MPI_Comm world, int size, config::CommBackend backend, at::Device device);
  // Over existing communicators (tests).
  ExpertParallel(std::unique_ptr<comm::Communicator> group, std::unique_ptr<comm::Communicator> replicas);

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  at::Tensor exchange_rows(const at::Tensor& send, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& recv_counts) const override;
  // The ranks that hold this rank's experts (world / size() of them): their parameters are
  // partitioned, gathered and reduced across these alone.
  comm::Communicator& replicas() const { return *replicas_; }

 private:
  std::unique_ptr<comm::Communicator> group_, replicas_;
};

}  // namespace superoffload::zero
