// The CPU's name, for `version` and the start-up log: what a user compares against the
// machine they asked for (a Grace Neoverse V2, a Sapphire Rapids).
#pragma once

#include <string>

namespace superoffload::cluster {

// From /proc/cpuinfo text: x86's "model name"; on Arm (which has none) the core named from
// "CPU implementer" and "CPU part" (0x41/0xd4f: Arm Neoverse V2, Grace's core). `machine` is
// the architecture this program runs as (uname's machine): a cpuinfo of another architecture
// means user-mode emulation (qemu-aarch64 shows the host's file), said as such. Empty when
// nothing is recognised.
std::string cpu_model_in_cpuinfo(const std::string& cpuinfo, const std::string& machine);
// The same for this machine, with its architecture: "AMD EPYC 7R13 (x86_64)",
// "Arm Neoverse V2 (aarch64)", "aarch64, emulated on AMD EPYC (x86_64 host)".
std::string cpu_model();

}  // namespace superoffload::cluster
