// A range of 1-based training steps written as text: "3" or "3-4" ([profile] trace_steps).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace superoffload::config {

struct StepRange {
  std::int64_t first = 0, last = 0;  // 1-based, inclusive
  bool contains(std::int64_t step) const { return step >= first && step <= last; }
};

// Empty text: no range. Otherwise "N" or "N-M" with 1 <= N <= M; anything else: nullopt with
// `problem` set to what is wrong.
std::optional<StepRange> parse_step_range(const std::string& text, std::string& problem);

}  // namespace superoffload::config
