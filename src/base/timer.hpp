// Wall-clock timing for phase timers and benchmarks (steady clock, seconds).
#pragma once

#include <chrono>

namespace superoffload::base {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Adds the seconds of its scope to a counter.
class ScopedTime {
 public:
  explicit ScopedTime(double& counter) : counter_(counter), start_(now_s()) {}
  ~ScopedTime() { counter_ += now_s() - start_; }
  ScopedTime(const ScopedTime&) = delete;
  ScopedTime& operator=(const ScopedTime&) = delete;

 private:
  double& counter_;
  double start_;
};

}  // namespace superoffload::base
