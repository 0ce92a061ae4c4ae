// Native bf16 detection from /proc/cpuinfo text (x86 flags, Arm features).
#include <gtest/gtest.h>

#include "cluster/cpu_bf16.hpp"

namespace c = superoffload::cluster;

TEST(CpuBf16, ReadsX86FlagsAndArmFeatures) {
  EXPECT_FALSE(c::native_bf16_in_cpuinfo("model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx2 fma avx512f\n"));
  EXPECT_TRUE(c::native_bf16_in_cpuinfo("model name\t: AMD EPYC 9B14\nflags\t\t: fpu avx2 avx512f avx512_bf16 vaes\n"));
  EXPECT_TRUE(c::native_bf16_in_cpuinfo("flags\t\t: fpu avx512f amx_bf16 amx_tile\n"));
  EXPECT_TRUE(c::native_bf16_in_cpuinfo("processor\t: 0\nFeatures\t: fp asimd sve sve2 bf16 i8mm\nCPU part\t: 0xd4f\n"));
  EXPECT_FALSE(c::native_bf16_in_cpuinfo("Features\t: fp asimd evtstrm aes pmull\n"));
  EXPECT_FALSE(c::native_bf16_in_cpuinfo("model name\t: bf16 in a name is no flag\n"));
  EXPECT_FALSE(c::native_bf16_in_cpuinfo(""));
}
