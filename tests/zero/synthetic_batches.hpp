// Test data for the ZeRO and offload tests: deterministic batches with learnable structure.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <utility>
#include <vector>

#include "model/causal_lm.hpp"
#include "train/step.hpp"

namespace superoffload::testing {

constexpr int64_t kVocab = 61;

// Sequences with learnable structure: t[j+1] = (t[j] + b) mod V with a stride b of 1 to 3
// per row, plus 10% noise. The global batch of a step is the same on every rank; ranks take disjoint rows.
inline std::pair<at::Tensor, at::Tensor> global_batch(int step, int rows, int seq) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  auto tokens = at::empty({rows, seq}, at::kLong);
  auto start = at::randint(0, kVocab, {rows}, generator, at::kLong);
  auto a = at::ones({rows}, at::kLong), b = at::randint(1, 4, {rows}, generator, at::kLong);
  auto noise = at::rand({rows, seq}, generator);
  auto random = at::randint(0, kVocab, {rows, seq}, generator, at::kLong);
  auto t = tokens.accessor<int64_t, 2>();
  for (int r = 0; r < rows; ++r) {
    int64_t v = start[r].item<int64_t>();
    for (int j = 0; j < seq; ++j) {
      t[r][j] = noise[r][j].item<float>() < 0.1f ? random[r][j].item<int64_t>() : v;
      v = (a[r].item<int64_t>() * v + b[r].item<int64_t>()) % kVocab;
    }
  }
  auto labels = model::next_token_labels(tokens);
  labels.narrow(0, 0, 1).narrow(1, 0, 3).fill_(model::kIgnoreLabel);  // a masked prompt in the first row
  return {tokens, labels};
}

// This rank's micro-batches of a step's global batch (`accumulation` micro-steps of `micro`
// rows per rank): rank r takes rows [(m·N + r)·micro, +micro) of micro-step m.
inline std::vector<train::MicroBatch> rank_micro_batches(int step, int micro, int accumulation, int world_size,
                                                         int rank, int seq) {
  auto [tokens, labels] = global_batch(step, micro * accumulation * world_size, seq);
  std::vector<train::MicroBatch> batches;
  for (int m = 0; m < accumulation; ++m) {
    const int64_t first = (static_cast<int64_t>(m) * world_size + rank) * micro;
    batches.push_back({tokens.narrow(0, first, micro), labels.narrow(0, first, micro)});
  }
  return batches;
}

}  // namespace superoffload::testing
