// Start-up and load work over a range, split across a rank's threads: random initialisation,
// the first touch of host buffers, scans of weights being read or saved.
//
// Not ATen's at::parallel_for/parallel_reduce: with LibTorch's OpenMP build their parallel body
// is a `#pragma omp parallel` inlined from its headers into the caller, and our sources are
// compiled without -fopenmp, so in our code they ran on the calling thread alone (an 8B's
// random initialisation took 49 s on 16 cores of an H200 machine, one core's rate).
// tests/layering/check_source_rules.py keeps them out of src/.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace superoffload::base {

// Calls fn(begin, end) on `threads` contiguous ranges covering [0, n) (fewer when n is
// smaller), each on its own thread; the calling thread takes the first range. The threads
// inherit the caller's CPU binding, not its thread-local state (LibTorch's grad mode among
// it: fn sets what it needs). Returns when every range is done, rethrowing the first
// exception one threw. For coarse work (each range at least milliseconds): a thread is
// started per range and call.
void parallel_ranges(int64_t n, int threads, const std::function<void(int64_t begin, int64_t end)>& fn);

// At most `threads`, and no more than gives each thread `grain` elements of n (at least 1):
// below that a thread's start outweighs its share.
inline int threads_for(int64_t n, int64_t grain, int threads) {
  const int64_t useful = grain > 0 ? n / grain : n;
  return static_cast<int>(useful < threads ? (useful > 1 ? useful : 1) : threads);
}

// The sum over [0, n) of fn(begin, end), a range's partial sum, in `threads` ranges. The
// partials are added in range order, so an integer result is exact; a floating-point one
// depends on `threads`.
template <class T, class F>
T parallel_sum(int64_t n, int threads, const F& fn) {
  std::vector<T> partial(static_cast<size_t>(threads > 1 ? threads : 1), T{});
  const int64_t ranges = static_cast<int64_t>(partial.size());
  parallel_ranges(ranges, ranges, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) partial[static_cast<size_t>(r)] = fn(r * n / ranges, (r + 1) * n / ranges);
  });
  T total{};
  for (const T& p : partial) total += p;
  return total;
}

}  // namespace superoffload::base
