// CPU bf16 support from /proc/cpuinfo.
#include "cluster/cpu_bf16.hpp"

#include <fstream>
#include <sstream>

namespace superoffload::cluster {

bool native_bf16_in_cpuinfo(const std::string& cpuinfo) {
  std::istringstream lines(cpuinfo);
  std::string line;
  while (std::getline(lines, line)) {
    // "flags : fpu ... avx512_bf16 ..." on x86, "Features : fp asimd ... bf16 ..." on Arm.
    if (line.rfind("flags", 0) != 0 && line.rfind("Features", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream words(line.substr(colon + 1));
    std::string word;
    while (words >> word) {
      if (word == "avx512_bf16" || word == "amx_bf16" || word == "bf16") return true;
    }
  }
  return false;
}

bool cpu_has_native_bf16() {
  std::ifstream file("/proc/cpuinfo");
  std::ostringstream text;
  text << file.rdbuf();
  return native_bf16_in_cpuinfo(text.str());
}

}  // namespace superoffload::cluster
