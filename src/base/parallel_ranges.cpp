// parallel_ranges: one std::thread per range beyond the caller's.
#include "base/parallel_ranges.hpp"

#include <algorithm>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

namespace superoffload::base {

void parallel_ranges(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t ranges = std::clamp<int64_t>(threads, 1, n);
  if (ranges == 1) {
    fn(0, n);
    return;
  }
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto run = [&](int64_t r) {
    try {
      fn(r * n / ranges, (r + 1) * n / ranges);
    } catch (...) {
      const std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(ranges - 1));
  int64_t started = 1;
  try {
    for (; started < ranges; ++started) workers.emplace_back(run, started);
  } catch (const std::system_error&) {
    // No thread to be had (a process or cgroup thread limit): the caller runs the rest.
  }
  run(0);
  for (int64_t r = started; r < ranges; ++r) run(r);
  for (auto& w : workers) w.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace superoffload::base
