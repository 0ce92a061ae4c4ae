// Batch-size derivation, matching DeepSpeed's behaviour for each combination of set keys.
#include "config/batch_sizes.hpp"

namespace superoffload::config {

bool resolve_batch_sizes(BatchSizes& s, std::int64_t world, std::string* problem) {
  auto fail = [&](const std::string& text) {
    if (problem) *problem = text;
    return false;
  };
  const bool tbs = s.train_batch_size > 0, mbs = s.micro_batch > 0, gas = s.accumulation > 0;
  const std::string w = std::to_string(world);
  if (tbs && mbs && gas) {
    if (s.train_batch_size != s.micro_batch * s.accumulation * world) {
      return fail("train_batch_size = " + std::to_string(s.train_batch_size) +
                  " but train_micro_batch_size_per_gpu x gradient_accumulation_steps x world size = " +
                  std::to_string(s.micro_batch) + " x " + std::to_string(s.accumulation) + " x " + w + " = " +
                  std::to_string(s.micro_batch * s.accumulation * world));
    }
  } else if (tbs && mbs) {
    if (s.train_batch_size % (s.micro_batch * world) != 0) {
      return fail("train_batch_size = " + std::to_string(s.train_batch_size) +
                  " is not a multiple of train_micro_batch_size_per_gpu x world size = " +
                  std::to_string(s.micro_batch) + " x " + w);
    }
    s.accumulation = s.train_batch_size / (s.micro_batch * world);
  } else if (tbs && gas) {
    if (s.train_batch_size % (s.accumulation * world) != 0) {
      return fail("train_batch_size = " + std::to_string(s.train_batch_size) +
                  " is not a multiple of gradient_accumulation_steps x world size = " +
                  std::to_string(s.accumulation) + " x " + w);
    }
    s.micro_batch = s.train_batch_size / (s.accumulation * world);
  } else if (mbs && gas) {
    s.train_batch_size = s.micro_batch * s.accumulation * world;
  } else if (tbs) {
    if (s.train_batch_size % world != 0) {
      return fail("train_batch_size = " + std::to_string(s.train_batch_size) + " is not a multiple of the world size " + w);
    }
    s.accumulation = 1;
    s.micro_batch = s.train_batch_size / world;
  } else if (mbs) {
    s.accumulation = 1;
    s.train_batch_size = s.micro_batch * world;
  } else if (gas) {
    s.micro_batch = 1;
    s.train_batch_size = s.accumulation * world;
  } else {
    s.micro_batch = 1;
    s.accumulation = 1;
    s.train_batch_size = world;
  }
  return true;
}

}  // namespace superoffload::config
