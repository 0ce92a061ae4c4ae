// A named span of our own code in a Kineto trace ([profile] trace_steps): a RecordFunction of
// the user scope, which the trace shows as a "user_annotation" around the operators, kernels'
// launches and synchronising calls it contains, so that the step trace's summary can say
// where a gap or a synchronisation comes from. Costs one check when no profiler is active
// (the name is built only when one is).
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <string>

namespace superoffload::zero {

class TraceScope {
 public:
  // `what` must start with "superoffload/" (train/trace_summary.hpp); `index` (a layer) is
  // appended as "#index" when not negative.
  explicit TraceScope(const char* what, int64_t index = -1) : guard_(at::RecordScope::USER_SCOPE) {
    if (guard_.isActive()) guard_.before(index < 0 ? std::string(what) : std::string(what) + "#" + std::to_string(index));
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  at::RecordFunction guard_;
};

}  // namespace superoffload::zero
