// Expert parallelism's exchanges with gradients, and the dispatch of a layer's routed pairs.
#include "model/blocks/expert_exchange.hpp"

#include <torch/autograd.h>

#include <numeric>

#include "base/error.hpp"

namespace superoffload::model {
namespace {

// The adjoint of sending rows by counts (s → r) is sending their gradients by the swapped
// counts (r → s). Every rank of the group runs the same layers in the same order (forward,
// recompute, backward), so the exchanges pair up without tags.
class ExchangeRows : public torch::autograd::Function<ExchangeRows> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& rows,
                            const ExpertParallelGroup* group, std::vector<int64_t> send_counts,
                            std::vector<int64_t> recv_counts) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    ctx->saved_data["send"] = send_counts;
    ctx->saved_data["recv"] = recv_counts;
    return group->exchange_rows(rows.contiguous(), send_counts, recv_counts);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* group = reinterpret_cast<const ExpertParallelGroup*>(ctx->saved_data["group"].toInt());
    const auto send = ctx->saved_data["send"].toIntVector(), recv = ctx->saved_data["recv"].toIntVector();
    return {group->exchange_rows(grads[0].contiguous(), recv, send), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::vector<int64_t> host_values(const at::Tensor& t) {
  const auto host = t.to(at::kCPU, at::kLong).contiguous();
  return {host.const_data_ptr<int64_t>(), host.const_data_ptr<int64_t>() + host.numel()};
}

}  // namespace

at::Tensor exchange_rows(const ExpertParallelGroup& group, const at::Tensor& rows, const std::vector<int64_t>& send_counts,
                         const std::vector<int64_t>& recv_counts) {
  const auto p = static_cast<size_t>(group.size());
  SO_CHECK(send_counts.size() == p && recv_counts.size() == p,
           "an expert-parallel exchange takes one send and one receive count per rank of its " << p);
  SO_CHECK(rows.dim() >= 1 && std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0}) == rows.size(0),
           "an expert-parallel exchange sends " << std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0})
                                                << " rows of a tensor of " << (rows.dim() ? rows.size(0) : 0));
  return ExchangeRows::apply(rows, &group, send_counts, recv_counts);
}

at::Tensor dispatch_to_experts(const ExpertParallelGroup& group, const at::Tensor& rows, const at::Tensor& expert_ends,
                               const LocalExperts& compute) {
  const int p = group.size();
  const int64_t experts = expert_ends.numel();
  SO_CHECK(experts % p == 0, experts << " experts do not divide among " << p << " expert-parallel ranks");
  const int64_t local = experts / p;
  // Pairs per expert, then per destination rank (experts are split in contiguous ranges).
  const auto ends = expert_ends.to(at::kLong);
  const auto per_expert = at::cat({ends.narrow(0, 0, 1), ends.narrow(0, 1, experts - 1) - ends.narrow(0, 0, experts - 1)});
  // What each rank sends here, per local expert: [p · local], rank 0's first. The one host read
  // of the layer: both exchanges need their sizes on the host.
  const std::vector<int64_t> blocks(static_cast<size_t>(p), local);
  const auto received_per_expert = group.exchange_rows(per_expert.contiguous(), blocks, blocks);
  const auto sent = host_values(per_expert), received = host_values(received_per_expert);
  std::vector<int64_t> send_counts(static_cast<size_t>(p), 0), recv_counts(static_cast<size_t>(p), 0);
  for (int64_t e = 0; e < experts; ++e) {
    send_counts[static_cast<size_t>(e / local)] += sent[static_cast<size_t>(e)];
    recv_counts[static_cast<size_t>(e / local)] += received[static_cast<size_t>(e)];
  }
  const auto arrived = exchange_rows(group, rows, send_counts, recv_counts);
  // Arrived rows are grouped by source rank, each source's by local expert: regroup them by
  // local expert (a stable sort keeps each expert's rows in source order).
  const auto& counts = received_per_expert;  // int64, as per_expert
  // Its length is known here: given, it costs a GPU no second read of the counts.
  const int64_t arrived_rows = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  const auto expert_of_row =
      at::repeat_interleave(at::arange(local, counts.options()).repeat({p}), counts, /*dim=*/0, arrived_rows);
  const auto [expert, order] = at::sort(expert_of_row, /*stable=*/true, 0, /*descending=*/false);
  LocalExpertRows local_rows;
  local_rows.rows = arrived.index_select(0, order);
  local_rows.expert = expert;
  local_rows.ends = counts.view({p, local}).sum(0).cumsum(0).to(at::kInt);
  const auto outputs = compute(local_rows);
  // Back to arrival order, then to the ranks the rows came from (counts swapped).
  const auto in_arrival_order = at::zeros_like(outputs).index_copy(0, order, outputs);
  return exchange_rows(group, in_arrival_order, recv_counts, send_counts);
}

}  // namespace superoffload::model
