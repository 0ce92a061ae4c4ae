// The exchanges of expert parallelism with gradients: routed rows to the ranks of their
// experts and back (expert_parallel.hpp), and the dispatch that a mixture-of-experts layer
// builds from them. Installed for plugins.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "model/expert_parallel.hpp"

namespace superoffload::model {

// ExpertParallelGroup::exchange_rows as an autograd node: backward sends each row's gradient
// back where the row came from (the counts swapped).
at::Tensor exchange_rows(const ExpertParallelGroup& group, const at::Tensor& rows, const std::vector<int64_t>& send_counts,
                         const std::vector<int64_t>& recv_counts);

// The rows an expert-parallel rank computes, grouped by its local expert.
struct LocalExpertRows {
  at::Tensor rows;    // [received pairs, ...], local expert 0's first
  at::Tensor expert;  // int64 [received pairs]: each row's local expert (0 .. count-1)
  at::Tensor ends;    // int32 [local experts]: where each local expert's rows end, on rows' device
};
// Maps the rows of one local expert group to their outputs [rows, ...] (any trailing shape).
using LocalExperts = std::function<at::Tensor(const LocalExpertRows&)>;

// One mixture-of-experts layer's experts under expert parallelism. `rows` [pairs, hidden] are
// this rank's routed (token, slot) pairs sorted by global expert, `expert_ends` int32 [experts]
// where each expert's pairs end. Each pair goes to the rank that computes its expert, the ranks
// compute their local experts on what they received (`compute`), and the outputs come back in
// the order of `rows`. Collective over the group (every rank calls it once per layer and pass,
// with or without pairs); reads the pair counts on the host once (the exchange's sizes).
at::Tensor dispatch_to_experts(const ExpertParallelGroup& group, const at::Tensor& rows, const at::Tensor& expert_ends,
                               const LocalExperts& compute);

}  // namespace superoffload::model
