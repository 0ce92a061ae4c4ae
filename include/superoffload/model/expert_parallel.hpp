// Expert parallelism as the model sees it: the experts of every mixture-of-experts layer are
// split across the P ranks of a group, rank r computing the contiguous range local_experts()
// gives it; a token's hidden state travels to the ranks of its experts and the outputs travel
// back, by all-to-all with counts that depend on the routing (blocks/expert_exchange.hpp
// carries gradients through it). The engine implements the group over its communicators and
// partitions the parameters the same way (zero/expert_parallel.hpp); a model never builds one.
// Installed for plugins.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace superoffload::model {

// The experts [first, first + count) one rank of an expert-parallel group computes.
struct ExpertRange {
  int64_t first = 0;
  int64_t count = 0;
  bool contains(int64_t expert) const { return expert >= first && expert < first + count; }
};

// Rank `rank` of `size` computes experts [rank·E/size, (rank+1)·E/size); `size` divides E
// (checked when the group is made).
inline ExpertRange local_experts(int64_t experts, int rank, int size) {
  const int64_t per_rank = experts / size;
  return {rank * per_rank, per_rank};
}

class ExpertParallelGroup {
 public:
  virtual ~ExpertParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  ExpertRange local(int64_t experts) const { return local_experts(experts, rank(), size()); }
  // `send` [rows, ...] contiguous: its first send_counts[0] rows go to rank 0, the next
  // send_counts[1] to rank 1, and so on. Returns the rows received, [Σ recv_counts, ...]: rank
  // 0's first. recv_counts[r] must be what rank r sends here. Collective over the group,
  // without autograd; any dtype the backend carries (int64 for counts).
  virtual at::Tensor exchange_rows(const at::Tensor& send, const std::vector<int64_t>& send_counts,
                                   const std::vector<int64_t>& recv_counts) const = 0;
};

}  // namespace superoffload::model
