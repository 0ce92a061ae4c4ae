// parse_step_range.
#include "config/step_range.hpp"

#include <cctype>

namespace superoffload::config {
namespace {

// A positive decimal number spanning all of `text`, or -1.
std::int64_t positive(const std::string& text) {
  if (text.empty() || text.size() > 12) return -1;
  std::int64_t value = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
    value = value * 10 + (c - '0');
  }
  return value >= 1 ? value : -1;
}

}  // namespace

std::optional<StepRange> parse_step_range(const std::string& text, std::string& problem) {
  problem.clear();
  if (text.empty()) return std::nullopt;
  const auto dash = text.find('-');
  const std::int64_t first = positive(text.substr(0, dash));
  const std::int64_t last = dash == std::string::npos ? first : positive(text.substr(dash + 1));
  if (first < 0 || last < 0) {
    problem = "\"" + text + "\" is not a step or a range of steps: write \"3\" or \"3-4\" (1-based, inclusive)";
    return std::nullopt;
  }
  if (last < first) {
    problem = "\"" + text + "\" ends before it starts: write the first step first";
    return std::nullopt;
  }
  return StepRange{first, last};
}

}  // namespace superoffload::config
