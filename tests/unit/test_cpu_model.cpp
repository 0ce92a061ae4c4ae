// The CPU's name from /proc/cpuinfo texts of an x86 node, a Grace node and qemu-user.
#include <gtest/gtest.h>

#include "cluster/cpu_model.hpp"

using superoffload::cluster::cpu_model;
using superoffload::cluster::cpu_model_in_cpuinfo;

namespace {

const char* kEpyc =
    "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel name\t: AMD EPYC 7R13 Processor\n"
    "flags\t\t: fpu vme avx2\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7R13 Processor\n";
// Arm's cpuinfo has no model name; Grace's cores are implementer 0x41, part 0xd4f (Neoverse V2).
const char* kGrace =
    "processor\t: 0\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics sve sve2 bf16\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd4f\nCPU revision\t: 0\n";

}  // namespace

TEST(CpuModel, X86ModelName) { EXPECT_EQ(cpu_model_in_cpuinfo(kEpyc, "x86_64"), "AMD EPYC 7R13 Processor"); }

TEST(CpuModel, GraceIsNeoverseV2) { EXPECT_EQ(cpu_model_in_cpuinfo(kGrace, "aarch64"), "Arm Neoverse V2"); }

TEST(CpuModel, UnknownArmPartByNumber) {
  EXPECT_EQ(cpu_model_in_cpuinfo("CPU implementer\t: 0x61\nCPU part\t: 0x022\n", "aarch64"),
            "Arm core (implementer 0x61, part 0x022)");
}

TEST(CpuModel, QemuUserShowsTheHostsFile) {
  // qemu-aarch64 on x86 passes the host's /proc/cpuinfo through: an x86 model for an Arm program.
  EXPECT_EQ(cpu_model_in_cpuinfo(kEpyc, "aarch64"), "aarch64, emulated on AMD EPYC 7R13 Processor (x86_64 host)");
}

TEST(CpuModel, NothingRecognised) {
  EXPECT_EQ(cpu_model_in_cpuinfo("", "x86_64"), "");
  EXPECT_EQ(cpu_model_in_cpuinfo("garbage\n:::\n", "aarch64"), "");
}

TEST(CpuModel, ThisMachineIsNamed) { EXPECT_FALSE(cpu_model().empty()); }
