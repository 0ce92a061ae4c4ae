// Ulysses attention: sequence shards to head shards and back, with gradients.
#include "model/blocks/sequence_parallel_attention.hpp"

#include <torch/autograd.h>

#include <cstdint>

#include "base/error.hpp"
#include "model/blocks/attention.hpp"

namespace superoffload::model {
namespace {

// All-to-all as an autograd node. Block r of rank s's send becomes block s of rank r's
// receive; the adjoint of that map is the map itself, so backward exchanges the gradient the
// same way. Every rank of the group runs the same layers in the same order (forward, and
// backward's recompute and backward), so the exchanges pair up without tags.
class AllToAll : public torch::autograd::Function<AllToAll> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& send,
                            const SequenceParallelGroup* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    return group->all_to_all(send.contiguous());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* group = reinterpret_cast<const SequenceParallelGroup*>(ctx->saved_data["group"].toInt());
    return {group->all_to_all(grads[0].contiguous()), at::Tensor()};
  }
};

}  // namespace

at::Tensor exchange(const SequenceParallelGroup& group, const at::Tensor& send) {
  SO_CHECK(send.dim() >= 1 && send.size(0) == group.size(),
           "a sequence-parallel exchange takes one block per rank: leading size " << (send.dim() ? send.size(0) : 0)
                                                                                   << " for " << group.size() << " ranks");
  return AllToAll::apply(send, &group);
}

std::string sequence_parallel_heads_problem(int64_t heads, int64_t kv_heads, int64_t group_size) {
  if (group_size <= 1) return {};
  if (heads % group_size != 0) {
    return "the model's " + std::to_string(heads) + " attention heads do not divide among " +
           std::to_string(group_size) + " sequence-parallel ranks (num_attention_heads must be a multiple of "
           "[parallel] sequence_parallel_size)";
  }
  if (kv_heads % group_size != 0 && group_size % kv_heads != 0) {
    return "the model's " + std::to_string(kv_heads) + " key/value heads neither divide among " +
           std::to_string(group_size) + " sequence-parallel ranks nor divide that number (so that each can be "
           "replicated for its query heads): choose a sequence_parallel_size that divides or is a multiple of " +
           std::to_string(kv_heads);
  }
  return {};
}

at::Tensor sequence_parallel_attention(const SequenceParallelGroup& group, const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& sinks, const AttendHeads& attend) {
  const int64_t p = group.size();
  const int64_t b = q.size(0), heads = q.size(1), shard = q.size(2), d = q.size(3);
  const int64_t kv = k.size(1);
  if (const auto problem = sequence_parallel_heads_problem(heads, kv, p); !problem.empty()) {
    throw Error(problem, "set [parallel] sequence_parallel_size accordingly", Error::UserInput{});
  }
  SO_CHECK(v.size(3) == d, "sequence-parallel attention expects one head size for q, k and v (" << d << " and "
                                                                                                 << v.size(3) << ")");
  // Fewer key/value heads than ranks: each is repeated for the p / kv ranks whose query heads
  // use it (rank r's query heads all read key/value head r·kv/p). The repeat's backward sums
  // their gradients.
  auto keys = k, values = v;
  if (kv % p != 0) {
    keys = keys.repeat_interleave(p / kv, 1);
    values = values.repeat_interleave(p / kv, 1);
  }
  const int64_t local_heads = heads / p, local_kv = keys.size(1) / p;
  // One exchange for q, k and v: [p, batch, shard, local_heads + 2·local_kv, d], block r
  // holding rank r's heads of this rank's tokens. Each input enters as a view in that order
  // ([batch, heads, shard, d] split into p blocks of heads), so the concatenation is the only
  // copy before the exchange.
  auto blocks = [&](const at::Tensor& t, int64_t n) { return t.view({b, p, n, shard, d}).permute({1, 0, 3, 2, 4}); };
  const auto send = at::cat({blocks(q, local_heads), blocks(keys, local_kv), blocks(values, local_kv)}, 3);
  // Received block r: rank r's tokens of this rank's heads, so the blocks in order are the row
  // (with one row per micro-batch the reshape is a view, no copy).
  const auto row = exchange(group, send).permute({1, 0, 2, 3, 4}).reshape({b, p * shard, local_heads + 2 * local_kv, d});
  auto heads_major = [](const at::Tensor& t) { return t.transpose(1, 2); };
  const auto q_row = heads_major(row.narrow(2, 0, local_heads));
  const auto k_row = heads_major(row.narrow(2, local_heads, local_kv));
  const auto v_row = heads_major(row.narrow(2, local_heads + local_kv, local_kv));
  const auto local_sinks = sinks.defined() ? sinks.narrow(0, group.rank() * local_heads, local_heads) : sinks;
  const auto out = attend(q_row, k_row, v_row, local_sinks);  // [batch, p·shard, local_heads·d]
  // Back: block r is rank r's tokens of this rank's heads; received block r is this rank's
  // tokens of rank r's heads, so concatenated in order they are all heads.
  const auto back = exchange(group, out.reshape({b, p, shard, local_heads * d}).permute({1, 0, 2, 3}));
  return back.permute({1, 2, 0, 3}).reshape({b, shard, heads * d});
}

at::Tensor causal_attention_in_context(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       int64_t sliding_window, const at::Tensor& sinks, const BatchContext& context) {
  // document_ids cover whole rows: under sequence parallelism the core sees whole rows too.
  const auto& documents = context.document_ids;
  auto attend = [&](const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_, const at::Tensor& sinks_) {
    return sinks_.defined() ? causal_attention_with_sinks(q_, k_, v_, sliding_window, sinks_, documents)
                            : causal_attention(q_, k_, v_, sliding_window, documents);
  };
  if (context.sequence_parallel == nullptr || context.sequence_parallel->size() == 1) return attend(q, k, v, sinks);
  return sequence_parallel_attention(*context.sequence_parallel, q, k, v, sinks, attend);
}

}  // namespace superoffload::model
