// CpuSet list formatting and parsing.
#include "cluster/cpu_set.hpp"

#include <algorithm>
#include <charconv>

#include "base/error.hpp"

namespace superoffload::cluster {

CpuSet::CpuSet(std::vector<int> cpus) : cpus_(std::move(cpus)) {
  std::sort(cpus_.begin(), cpus_.end());
  cpus_.erase(std::unique(cpus_.begin(), cpus_.end()), cpus_.end());
}

CpuSet CpuSet::parse(std::string_view text) {
  std::vector<int> cpus;
  auto number = [&](std::string_view part) {
    int value = -1;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    SO_CHECK(ec == std::errc() && end == part.data() + part.size() && value >= 0,
             "malformed CPU list '" << text << "': '" << part << "' is not a CPU number");
    return value;
  };
  while (!text.empty()) {
    const auto comma = text.find(',');
    const auto item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    if (const auto dash = item.find('-'); dash != std::string_view::npos) {
      const int first = number(item.substr(0, dash));
      const int last = number(item.substr(dash + 1));
      SO_CHECK(first <= last, "malformed CPU list: range '" << item << "' runs backwards");
      for (int c = first; c <= last; ++c) cpus.push_back(c);
    } else {
      cpus.push_back(number(item));
    }
  }
  return CpuSet(std::move(cpus));
}

bool CpuSet::contains(int cpu) const { return std::binary_search(cpus_.begin(), cpus_.end(), cpu); }

bool CpuSet::intersects(const CpuSet& other) const { return !intersection(other).empty(); }

CpuSet CpuSet::intersection(const CpuSet& other) const {
  std::vector<int> out;
  std::set_intersection(cpus_.begin(), cpus_.end(), other.cpus_.begin(), other.cpus_.end(),
                        std::back_inserter(out));
  return CpuSet(std::move(out));
}

std::string CpuSet::to_string() const {
  std::string out;
  for (size_t i = 0; i < cpus_.size();) {
    size_t j = i;
    while (j + 1 < cpus_.size() && cpus_[j + 1] == cpus_[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus_[i]);
    if (j > i) out += '-' + std::to_string(cpus_[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace superoffload::cluster
