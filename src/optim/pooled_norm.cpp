// squared_norm on the optimizer's pool.
#include "optim/pooled_norm.hpp"

#include <cmath>
#include <vector>

namespace superoffload::optim {

// On the pool, not ATen: an ATen reduction called from the speculation worker ran on an
// OpenMP team of that thread, which competed with the pool for the bound cores (on a 16-core
// H100 node the speculated CPU steps took 6x longer). Eight running sums per thread: one sum
// is bound by the latency of its additions (0.45 G elements/s per thread), eight by memory
// bandwidth. The blocks' sums are added in block order, not as each block finishes: with three
// or more threads the order of the double additions changed the norm's last bits from run to
// run, and with them the clipping coefficient and so every clipped step.
double squared_norm(ThreadPool& pool, const float* data, size_t n) {
  constexpr size_t kAlign = 64;
  std::vector<double> sums(pool.size(), 0.0);
  const size_t per_block = pool.block_size(n, kAlign);
  pool.parallel_for(n, kAlign, [&](size_t b, size_t e) {
    constexpr size_t kLanes = 8;
    double lanes[kLanes] = {};
    size_t i = b;
    for (; i + kLanes <= e; i += kLanes) {
      for (size_t k = 0; k < kLanes; ++k) lanes[k] += static_cast<double>(data[i + k]) * static_cast<double>(data[i + k]);
    }
    double sum = 0;
    for (; i < e; ++i) sum += static_cast<double>(data[i]) * static_cast<double>(data[i]);
    for (double lane : lanes) sum += lane;
    sums[b / per_block] = sum;  // each block's own slot
  });
  double total = 0;
  for (double sum : sums) total += sum;
  return std::isfinite(total) ? total : INFINITY;
}

}  // namespace superoffload::optim
