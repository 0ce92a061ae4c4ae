// DeepSpeed's batch-size rules: train_batch_size = micro-batch x accumulation x world size;
// any unset (0) value is derived from the others.
#pragma once

#include <cstdint>
#include <string>

namespace superoffload::config {

struct BatchSizes {
  std::int64_t train_batch_size = 0;
  std::int64_t micro_batch = 0;
  std::int64_t accumulation = 0;
};

// Fills in unset values for `world_size` ranks. On inconsistent or indivisible values,
// returns false and explains in `problem`.
bool resolve_batch_sizes(BatchSizes& sizes, std::int64_t world_size, std::string* problem);

}  // namespace superoffload::config
