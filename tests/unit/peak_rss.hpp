// The process's peak resident set (VmHWM of /proc/self/status) in bytes, 0 where unreadable:
// the memory tests measure how much one computation raises it (each test runs in its own process).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace superoffload::testing {

inline int64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t kib = 0;
  while (status >> key) {
    if (key == "VmHWM:") {
      status >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

}  // namespace superoffload::testing
