// The CPU's name from /proc/cpuinfo.
#include "cluster/cpu_model.hpp"

#include <sys/utsname.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace superoffload::cluster {
namespace {

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// Arm's own cores (implementer 0x41) that run servers and superchips; others by number.
std::string arm_core_name(unsigned implementer, unsigned part) {
  static const std::map<unsigned, const char*> arm_parts = {
      {0xd0c, "Neoverse N1"}, {0xd40, "Neoverse V1"}, {0xd49, "Neoverse N2"},
      {0xd4f, "Neoverse V2"}, {0xd84, "Neoverse V3"}, {0xd8e, "Neoverse N3"},
      {0xd08, "Cortex-A72"},  {0xd0b, "Cortex-A76"},  {0xd41, "Cortex-A78"}};
  if (implementer == 0x41) {
    if (auto found = arm_parts.find(part); found != arm_parts.end()) return std::string("Arm ") + found->second;
  }
  char text[64];
  std::snprintf(text, sizeof text, "Arm core (implementer 0x%02x, part 0x%03x)", implementer, part);
  return text;
}

}  // namespace

std::string cpu_model_in_cpuinfo(const std::string& cpuinfo, const std::string& machine) {
  std::istringstream lines(cpuinfo);
  std::string line, x86_model;
  long implementer = -1, part = -1;
  while (std::getline(lines, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trimmed(line.substr(0, colon)), value = trimmed(line.substr(colon + 1));
    if (key == "model name" && x86_model.empty()) x86_model = value;
    if (key == "CPU implementer" && implementer < 0) implementer = std::strtol(value.c_str(), nullptr, 0);
    if (key == "CPU part" && part < 0) part = std::strtol(value.c_str(), nullptr, 0);
  }
  const bool arm_machine = machine == "aarch64" || machine == "arm64";
  if (implementer >= 0 && part >= 0) {
    const std::string name = arm_core_name(static_cast<unsigned>(implementer), static_cast<unsigned>(part));
    return arm_machine || machine.empty() ? name : machine + ", emulated on " + name + " (Arm host)";
  }
  if (!x86_model.empty()) {
    return arm_machine ? machine + ", emulated on " + x86_model + " (x86_64 host)" : x86_model;
  }
  return "";
}

std::string cpu_model() {
  std::ifstream file("/proc/cpuinfo");
  std::ostringstream text;
  text << file.rdbuf();
  utsname names{};
  const std::string machine = uname(&names) == 0 ? names.machine : "";
  std::string model = cpu_model_in_cpuinfo(text.str(), machine);
  if (model.empty()) return machine.empty() ? "unknown" : machine;
  if (model.find("emulated") != std::string::npos || machine.empty()) return model;
  return model + " (" + machine + ")";
}

}  // namespace superoffload::cluster
