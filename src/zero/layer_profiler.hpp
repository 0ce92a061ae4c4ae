// Time per layer and phase of one step ([profile] step): the engine brackets each layer's
// gather, forward, recompute, backward and reduce with begin/end while a profiler is set. On a
// CUDA device the brackets are events on the current stream, read once the step is done (host
// clocks would time the kernel launches, not the kernels); on the CPU they read the clock.
// Micro-batches add up.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <array>
#include <cstddef>
#include <deque>
#include <tuple>
#include <vector>

#include "zero/trace_scope.hpp"

namespace superoffload::zero {

enum class ProfilePhase { gather, forward, recompute, backward, reduce };
inline constexpr size_t kProfilePhases = 5;
inline constexpr const char* kProfilePhaseNames[kProfilePhases] = {"gather", "forward", "recompute", "backward",
                                                                  "reduce"};
// The phases' spans in a step trace (zero/trace_scope.hpp), "#layer" appended.
inline constexpr const char* kProfilePhaseScopes[kProfilePhases] = {
    "superoffload/gather", "superoffload/forward", "superoffload/recompute", "superoffload/backward",
    "superoffload/reduce"};

class LayerProfiler {
 public:
  LayerProfiler(at::Device device, size_t layers);
  void begin(size_t layer, ProfilePhase phase);
  void end(size_t layer, ProfilePhase phase);
  // Seconds per layer and phase (waits for the device's events).
  std::vector<std::array<double, kProfilePhases>> seconds() const;

 private:
  struct Open {
    double start_s = 0;
    c10::Event* start_event = nullptr;
  };
  c10::Event* record();
  at::Device device_;
  std::vector<std::array<double, kProfilePhases>> host_s_;  // CPU runs
  std::vector<std::array<Open, kProfilePhases>> open_;
  std::deque<c10::Event> events_;  // CUDA runs: every event recorded (a deque keeps their addresses)
  std::vector<std::tuple<size_t, size_t, c10::Event*, c10::Event*>> spans_;  // layer, phase, start, end
};

// Brackets a phase when a profiler is set, and names it in a step trace when one is recorded
// (RAII; a check each without either).
class ProfileScope {
 public:
  ProfileScope(LayerProfiler* profiler, size_t layer, ProfilePhase phase)
      : trace_(kProfilePhaseScopes[static_cast<size_t>(phase)], static_cast<int64_t>(layer)),
        profiler_(profiler),
        layer_(layer),
        phase_(phase) {
    if (profiler_) profiler_->begin(layer_, phase_);
  }
  ~ProfileScope() {
    if (profiler_) profiler_->end(layer_, phase_);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  TraceScope trace_;  // opened first, closed last: the profiler's own events fall inside
  LayerProfiler* profiler_;
  size_t layer_;
  ProfilePhase phase_;
};

}  // namespace superoffload::zero
