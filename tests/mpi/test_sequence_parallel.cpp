// Ulysses attention (#50) against attention over whole rows, under mpirun with 2 and 4 ranks:
// every group size that divides the world, the output of each rank's shard and the gradients
// of its shard's q, k, v (and sinks) equal to fp32 round-off what one rank computes over the
// whole row. Cases: grouped key/value heads split over the group and replicated when fewer
// than its ranks, sliding windows, packed documents whose boundaries fall inside and across
// shards, GPT-OSS's sinks. Then the engine's side: shards, the group average, and the load-time
// refusals that name the numbers.
#include <gtest/gtest.h>
#include <mpi.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "base/error.hpp"
#include "mpi_ranks.hpp"
#include "model/blocks/attention.hpp"
#include "model/blocks/sequence_parallel_attention.hpp"
#include "zero/sequence_parallel.hpp"

namespace so = superoffload;
namespace m = so::model;

namespace {

using superoffload::testing::world_rank;
using superoffload::testing::world_size;

struct Case {
  int64_t heads, kv_heads, window;
  bool documents, sinks;
};

// Every rank of a group draws the same rows (seeded by the group), as a sequence-parallel
// group trains the same samples.
void check(const so::zero::SequenceParallel& group, const Case& c) {
  const int p = group.size(), r = group.rank();
  const int64_t batch = 2, shard = 6, seq = shard * p, d = 8;
  at::manual_seed(100 + world_rank() / p);
  const auto q = at::randn({batch, c.heads, seq, d});
  const auto k = at::randn({batch, c.kv_heads, seq, d});
  const auto v = at::randn({batch, c.kv_heads, seq, d});
  const auto sinks = c.sinks ? at::randn({c.heads}) : at::Tensor();
  const auto weight = at::randn({batch, seq, c.heads * d});  // the loss: sum(out * weight)
  at::Tensor documents;
  if (c.documents) {  // boundaries at 0, 4, 5 and 2·shard + 1 of row 0; row 1 one document
    documents = at::zeros({batch, seq}, at::kLong);
    documents[0].narrow(0, 4, seq - 4).add_(1);
    documents[0].narrow(0, 5, seq - 5).add_(1);
    if (seq > 2 * shard + 1) documents[0].narrow(0, 2 * shard + 1, seq - 2 * shard - 1).add_(1);
  }

  // The reference: one rank, whole rows.
  auto leaf = [](const at::Tensor& t) { return t.defined() ? t.clone().requires_grad_(true) : t; };
  const auto rq = leaf(q), rk = leaf(k), rv = leaf(v), rs = leaf(sinks);
  const auto reference = c.sinks ? m::causal_attention_with_sinks(rq, rk, rv, c.window, rs, documents)
                                 : m::causal_attention(rq, rk, rv, c.window, documents);
  (reference * weight).sum().backward();

  // This rank's shard through the group.
  auto mine = [&](const at::Tensor& t) { return t.narrow(2, r * shard, shard).clone().requires_grad_(true); };
  const auto sq = mine(q), sk = mine(k), sv = mine(v), ss = leaf(sinks);
  m::BatchContext context;
  context.document_ids = documents;
  context.sequence_parallel = &group;
  const auto out = m::causal_attention_in_context(sq, sk, sv, c.window, ss, context);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{batch, shard, c.heads * d}));
  (out * weight.narrow(1, r * shard, shard)).sum().backward();

  const std::string what = "group of " + std::to_string(p) + ", heads " + std::to_string(c.heads) + "/" +
                           std::to_string(c.kv_heads) + ", window " + std::to_string(c.window) +
                           (c.documents ? ", documents" : "") + (c.sinks ? ", sinks" : "");
  auto near = [&](const at::Tensor& ours, const at::Tensor& theirs, const char* name) {
    const double gap = (ours - theirs).abs().max().item<double>();
    EXPECT_LT(gap, 2e-5) << name << " (" << what << ")";
  };
  near(out, reference.narrow(1, r * shard, shard), "output");
  near(sq.grad(), rq.grad().narrow(2, r * shard, shard), "dq");
  near(sk.grad(), rk.grad().narrow(2, r * shard, shard), "dk");
  near(sv.grad(), rv.grad().narrow(2, r * shard, shard), "dv");
  if (c.sinks) {
    // A rank attends with its heads over the whole row, and backward brings it the whole row's
    // gradient of their output: its sinks gradient is complete for its heads and zero for the
    // others, so the group's sum (as ZeRO's reduction sums every rank's) is the reference's.
    auto total = ss.grad().to(at::kDouble).contiguous();
    group.communicator().all_reduce_host(total.data_ptr<double>(), static_cast<size_t>(total.numel()),
                                         so::comm::ReduceOp::sum);
    near(total.to(at::kFloat), rs.grad(), "dsinks (summed over the group)");
  }
}

}  // namespace

TEST(SequenceParallelAttention, EqualsWholeRowAttention) {
  for (int p = 1; p <= world_size(); p *= 2) {
    if (world_size() % p != 0) continue;
    so::zero::SequenceParallel group(MPI_COMM_WORLD, p, so::config::CommBackend::mpi, at::kCPU);
    ASSERT_EQ(group.size(), p);
    ASSERT_EQ(group.rank(), world_rank() % p);
    for (const Case& c : {Case{4, 4, 0, false, false}, Case{4, 2, 0, false, false}, Case{4, 1, 0, false, false},
                          Case{8, 2, 5, false, false}, Case{4, 2, 0, true, false}, Case{4, 2, 7, true, false},
                          Case{4, 2, 5, false, true}, Case{4, 4, 0, true, true}}) {
      check(group, c);
    }
  }
}

TEST(SequenceParallel, ShardsAndAverages) {
  const int p = world_size();
  so::zero::SequenceParallel group(MPI_COMM_WORLD, p, so::config::CommBackend::mpi, at::kCPU);
  const auto rows = at::arange(3 * 4 * p, at::kLong).view({3, 4 * p});
  const auto shard = group.shard(rows);
  EXPECT_TRUE(at::equal(shard, rows.narrow(1, 4 * group.rank(), 4)));
  auto values = at::full({5}, static_cast<float>(group.rank()));
  group.average(values);
  EXPECT_TRUE(at::allclose(values, at::full({5}, (p - 1) / 2.0f)));
  // A row that does not divide is refused, naming the sizes.
  if (p > 1) {
    try {
      group.shard(at::zeros({1, 4 * p + 1}, at::kLong));
      ADD_FAILURE() << "an indivisible row was sharded";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("does not divide among " + std::to_string(p)), std::string::npos) << e.what();
    }
  }
}

TEST(SequenceParallel, RefusesHeadsThatDoNotDivide) {
  EXPECT_EQ(m::sequence_parallel_heads_problem(32, 8, 4), "");
  EXPECT_EQ(m::sequence_parallel_heads_problem(32, 2, 8), "");  // replicated 4 times
  EXPECT_NE(m::sequence_parallel_heads_problem(6, 2, 4).find("6 attention heads"), std::string::npos);
  EXPECT_NE(m::sequence_parallel_heads_problem(12, 3, 4).find("3 key/value heads"), std::string::npos);
  EXPECT_EQ(m::sequence_parallel_heads_problem(6, 2, 1), "");
}
