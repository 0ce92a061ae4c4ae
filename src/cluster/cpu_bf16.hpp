// Whether this CPU multiplies bf16 natively. Without it LibTorch falls back to emulated bf16
// matrix products on the CPU: on a 2-core AMD EPYC (AVX2) a GPT-2 124M step took 120 s in
// bf16 against 2.9 s in fp32. The trainer warns before a CPU run in bf16 on such a CPU.
#pragma once

#include <string>

namespace superoffload::cluster {

// From /proc/cpuinfo text: x86 flags avx512_bf16 or amx_bf16, or Arm's bf16 feature.
bool native_bf16_in_cpuinfo(const std::string& cpuinfo);
// The same for this machine (false when /proc/cpuinfo cannot be read).
bool cpu_has_native_bf16();

}  // namespace superoffload::cluster
