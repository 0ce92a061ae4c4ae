// Counting NaN and ±inf in fp32 host memory: the checks of weights as they are read
// (model_io/weights) and before they are saved (train/checkpointing).
#pragma once

#include <cstdint>

namespace superoffload::base {

// Elements of values[0, n) whose exponent bits are all set (NaN or ±inf), in one pass split over
// `threads` threads (parallel_ranges). No temporaries: ATen's isfinite().sum() allocates a
// boolean tensor of n bytes first (a 1 GB layer's check allocated 2 GB and cost a third of
// its read).
int64_t count_non_finite(const float* values, int64_t n, int threads);

}  // namespace superoffload::base
