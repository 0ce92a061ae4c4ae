// What every benchmark prints and how it summarises rounds: the CPU it ran on (speed claims
// hold per CPU) and medians over interleaved rounds (robust on shared machines, where the
// best round is luck).
#pragma once

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace bench {

// "AMD EPYC 7B13", "Intel(R) Xeon(R) Platinum 8481C", or on Arm the implementer and part.
inline std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, implementer, part;
  auto value = [](const std::string& l) { return l.substr(l.find(':') + 2); };
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) return value(line);
    if (line.rfind("CPU implementer", 0) == 0) implementer = value(line);
    if (line.rfind("CPU part", 0) == 0) part = value(line);
  }
  return implementer.empty() ? "unknown CPU" : "Arm implementer " + implementer + " part " + part;
}

// The upper median (the middle value; of two middles, the larger). `values` must not be empty.
inline double median(std::vector<double> values) {
  const auto middle = values.begin() + static_cast<long>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

}  // namespace bench
