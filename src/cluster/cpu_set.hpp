// A set of logical CPUs (hwloc PU OS indices, what taskset and --cpu-bind use), printed
// in the usual list form "0-3,8,10-11".
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace superoffload::cluster {

class CpuSet {
 public:
  CpuSet() = default;
  explicit CpuSet(std::vector<int> cpus);

  // "0-3,8" → {0,1,2,3,8}; throws superoffload::Error on malformed text.
  static CpuSet parse(std::string_view text);

  const std::vector<int>& cpus() const { return cpus_; }  // sorted, unique
  bool empty() const { return cpus_.empty(); }
  size_t size() const { return cpus_.size(); }
  bool contains(int cpu) const;
  bool intersects(const CpuSet& other) const;
  CpuSet intersection(const CpuSet& other) const;
  std::string to_string() const;

  friend bool operator==(const CpuSet&, const CpuSet&) = default;

 private:
  std::vector<int> cpus_;
};

}  // namespace superoffload::cluster
