// A validation share held out of a dataset ([data] eval_fraction): which samples are never
// trained on. It depends on the sample count, the share and the seed only — not on the world
// size or the rank — so every run of the same data and seed holds out the same samples.
#pragma once

#include <cstdint>
#include <vector>

namespace superoffload::data {

struct HoldOut {
  std::vector<int64_t> train;  // sample indices trained on, ascending
  std::vector<int64_t> eval;   // sample indices held out, ascending
};

// ceil(fraction × samples) samples (as HF's train_test_split rounds a float test_size), at
// least one, drawn without replacement from `seed`; `fraction` in (0, 1).
HoldOut hold_out(int64_t samples, double fraction, uint64_t seed);

}  // namespace superoffload::data
