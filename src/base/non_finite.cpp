// count_non_finite.
#include "base/non_finite.hpp"

#include <cstring>

#include "base/parallel_ranges.hpp"

namespace superoffload::base {

int64_t count_non_finite(const float* values, int64_t n, int threads) {
  return parallel_sum<int64_t>(n, threads, [values](int64_t begin, int64_t end) {
    int64_t count = 0;
    for (int64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, values + i, sizeof bits);
      count += (bits & 0x7f800000u) == 0x7f800000u;
    }
    return count;
  });
}

}  // namespace superoffload::base
