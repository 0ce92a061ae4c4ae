// The model blocks' switches for comparisons (SUPEROFFLOAD_FUSED_PROJECTIONS,
// SUPEROFFLOAD_SWIGLU_KERNEL, SUPEROFFLOAD_GQA_KERNEL): read at each call, so that a benchmark
// can change them between rounds.
#pragma once

#include <cstdlib>
#include <cstring>

namespace superoffload::model {

// Whether environment variable `variable` is set to `value`.
inline bool env_switch_is(const char* variable, const char* value) {
  const char* set = std::getenv(variable);
  return set != nullptr && std::strcmp(set, value) == 0;
}

}  // namespace superoffload::model
