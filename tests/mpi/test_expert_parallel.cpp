// Expert parallelism (#49) under mpirun with 2 and 4 ranks, for every expert-parallel size that
// divides the world: the exchange of routed rows with gradients against one rank computing
// every expert, and a layer's partitioning — each rank holds and gathers its own experts only
// (per-expert tensors and rows of stacked ones), every element of the layer lies in exactly one
// rank's shard, and the gathered values are the layer's.
#include <gtest/gtest.h>
#include <mpi.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "comm/mpi_communicator.hpp"
#include "mpi_ranks.hpp"
#include "model/blocks/expert_exchange.hpp"
#include "zero/buffer_cache.hpp"
#include "zero/expert_parallel.hpp"
#include "zero/partitioned_layer.hpp"

namespace so = superoffload;
namespace m = so::model;

namespace {

using superoffload::testing::world_rank;
using superoffload::testing::world_size;

constexpr int64_t kExperts = 4, kHidden = 3;

// Expert e maps a row x to x · W_e (W_e drawn from a generator seeded by e).
at::Tensor expert_weight(int64_t e) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + e);
  return at::randn({kHidden, kHidden}, generator);
}

// Rows sorted by expert with their group ends, as route_pairs makes them: rank-dependent
// counts, some experts empty on some ranks.
std::pair<at::Tensor, at::Tensor> routed_rows() {
  at::manual_seed(7 + world_rank());
  const int64_t rows = 5 + world_rank() * 3;
  auto expert = at::randint(0, kExperts, {rows}, at::kLong);
  if (world_rank() % 2 == 1) expert.fill_(kExperts - 1);  // every row on one expert
  expert = std::get<0>(at::sort(expert));
  const auto ends = at::searchsorted(expert, at::arange(1, kExperts + 1, at::kLong), /*out_int32=*/true);
  return {at::randn({rows, kHidden}), ends};
}

TEST(ExpertParallel, DispatchEqualsEveryExpertOnOneRank) {
  const auto [rows_data, ends] = routed_rows();
  const auto ends_long = ends.to(at::kLong);
  // The reference: this rank computes every expert on its own rows.
  auto reference_rows = rows_data.clone().requires_grad_(true);
  std::vector<at::Tensor> outputs;
  int64_t start = 0;
  for (int64_t e = 0; e < kExperts; ++e) {
    const int64_t end = ends_long[e].item<int64_t>();
    outputs.push_back(at::matmul(reference_rows.narrow(0, start, end - start), expert_weight(e)));
    start = end;
  }
  const auto reference = at::cat(outputs);
  const auto weight = at::randn_like(reference);  // the loss: sum(out * weight)
  (reference * weight).sum().backward();

  for (int p = 1; p <= world_size(); p *= 2) {
    if (world_size() % p != 0 || kExperts % p != 0) continue;
    so::zero::ExpertParallel group(MPI_COMM_WORLD, p, so::config::CommBackend::mpi, at::kCPU);
    ASSERT_EQ(group.rank(), world_rank() % p);
    ASSERT_EQ(group.replicas().size(), world_size() / p);
    const auto local = group.local(kExperts);
    auto rows = rows_data.clone().requires_grad_(true);
    const auto out = m::dispatch_to_experts(group, rows, ends, [&](const m::LocalExpertRows& here) {
      // Each local expert's rows, by the ends; the expert ids agree with them.
      std::vector<at::Tensor> parts;
      int64_t from = 0;
      for (int64_t e = 0; e < local.count; ++e) {
        const int64_t to = here.ends[e].item<int>();
        EXPECT_TRUE(at::equal(here.expert.narrow(0, from, to - from), at::full({to - from}, e, at::kLong)));
        parts.push_back(at::matmul(here.rows.narrow(0, from, to - from), expert_weight(local.first + e)));
        from = to;
      }
      EXPECT_EQ(from, here.rows.size(0));
      return at::cat(parts);
    });
    EXPECT_TRUE(at::allclose(out, reference, 1e-6, 1e-6)) << "EP " << p << ": outputs differ";
    (out * weight).sum().backward();
    EXPECT_TRUE(at::allclose(rows.grad(), reference_rows.grad(), 1e-6, 1e-6)) << "EP " << p << ": gradients differ";
  }
}

// A mixture-of-experts layer as the engine sees it: a shared weight, per-expert tensors and a
// stacked one.
class ToyMoeLayer : public m::Layer {
 public:
  ToyMoeLayer() : Layer("block.") {
    shared = register_parameter("router", at::arange(10, at::kFloat).view({2, 5}));
    for (int64_t e = 0; e < kExperts; ++e) {
      own.push_back(register_parameter("expert" + std::to_string(e),
                                       at::full({2, 3}, static_cast<float>(100 + e)) + at::arange(6).view({2, 3})));
    }
    stacked = register_parameter("stacked", at::arange(kExperts * 5, at::kFloat).view({kExperts, 5}) + 1000);
  }
  at::Tensor forward(const at::Tensor& x, const m::BatchContext&) override { return x; }
  int64_t expert_count() const override { return kExperts; }
  int64_t expert_of(const std::string& name) const override {
    if (name == "block.stacked") return kStackedExperts;
    if (name.rfind("block.expert", 0) == 0) return std::stoll(name.substr(12));
    return kSharedParameter;
  }
  at::Tensor shared, stacked;
  std::vector<at::Tensor> own;
};

TEST(ExpertParallel, LayerHoldsAndGathersItsOwnExpertsOnly) {
  so::comm::MpiCommunicator world(MPI_COMM_WORLD);
  for (int p = 1; p <= world_size(); p *= 2) {
    if (world_size() % p != 0 || kExperts % p != 0) continue;
    so::zero::ExpertParallel group(MPI_COMM_WORLD, p, so::config::CommBackend::mpi, at::kCPU);
    auto layer = std::make_shared<ToyMoeLayer>();
    const auto original_shared = layer->shared.detach().clone(), original_stacked = layer->stacked.detach().clone();
    std::vector<at::Tensor> original_own;
    for (const auto& t : layer->own) original_own.push_back(t.detach().clone());
    so::zero::BufferCache buffers(true, 4);
    so::zero::PartitionedLayer partitioned(layer, world, buffers, at::kFloat, at::kCPU, false,
                                           [](const std::string&) { return true; }, nullptr, &group);
    const auto local = group.local(kExperts);
    const int64_t full = partitioned.layout().numel();
    // Every element of the layer in exactly one rank's shard.
    auto owners = at::zeros({full}, at::kInt);
    for (const auto& piece : partitioned.shard_pieces()) {
      owners.narrow(0, partitioned.layout().parameters()[piece.parameter].offset + piece.parameter_offset, piece.length)
          .add_(1);
    }
    MPI_Allreduce(MPI_IN_PLACE, owners.data_ptr<int>(), static_cast<int>(full), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_TRUE(at::equal(owners, at::ones({full}, at::kInt))) << "EP " << p << ": an element held twice or never";
    // What a gather brings: the shared weight and this rank's experts, nothing else (the
    // buffer: the regions over more than one rank, with their padding).
    const int64_t expected = 10 + local.count * (6 + 5);
    EXPECT_LT(partitioned.gathered_numel(), (p == 1 ? full : expected) + 2 * world_size())
        << "EP " << p << ": more than this rank's experts gathered";
    partitioned.wait_gathered();
    int64_t bound = 0;
    for (const auto& [name, t] : layer->hf_parameters()) bound += t.numel();
    EXPECT_EQ(bound, expected) << "EP " << p;
    EXPECT_TRUE(at::equal(layer->shared, original_shared));
    for (int64_t e = 0; e < kExperts; ++e) {
      if (local.contains(e)) {
        EXPECT_TRUE(at::equal(layer->own[e], original_own[e])) << "expert " << e;
      } else {
        EXPECT_EQ(layer->own[e].numel(), 0) << "expert " << e << " is another rank's, yet bound here";
      }
    }
    EXPECT_TRUE(at::equal(layer->stacked, original_stacked.narrow(0, local.first, local.count)));
    partitioned.release();
  }
}

}  // namespace
