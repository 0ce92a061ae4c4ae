// Host memory for device copies (the offloaded optimizer, activation checkpoints): pinned only when asked, refused with the reason
// when RLIMIT_MEMLOCK is too small, and a failed pinning (no GPU driver here) falls back to
// plain memory that works.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include "base/logging.hpp"
#include "cluster/host_memory.hpp"

namespace o = superoffload::cluster;

TEST(HostMemory, CpuOnlyRunsUsePlainMemory) {
  o::HostMemory memory(false, 1 << 20);
  EXPECT_FALSE(memory.pinned());
  auto t = memory.empty({16}, at::kFloat);
  EXPECT_FALSE(t.is_pinned());
}

TEST(HostMemory, SmallMemlockLimitIsReportedNotFatal) {
  superoffload::log::init(superoffload::log::Level::error);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &old), 0);
  rlimit small = old;
  small.rlim_cur = 64 * 1024;  // lowering is always allowed
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &small), 0);
  o::HostMemory memory(true, int64_t{1} << 30);
  EXPECT_FALSE(memory.pinned());
  EXPECT_NE(memory.why_not_pinned().find("ulimit -l"), std::string::npos) << memory.why_not_pinned();
  setrlimit(RLIMIT_MEMLOCK, &old);
}

TEST(HostMemory, FailedPinningFallsBackToPlainMemory) {
  superoffload::log::init(superoffload::log::Level::error);
  o::HostMemory memory(true, 1024);
  auto t = memory.empty({8}, at::kFloat);
  t.fill_(1.0f);
  EXPECT_EQ(t.sum().item<float>(), 8.0f);
  if (!memory.pinned()) EXPECT_FALSE(memory.why_not_pinned().empty()) << "a fallback says why";
}

// zeros() skips the zeroing only for a fresh pinned mapping: memory that LibTorch's allocator
// hands out again (garbage from the last use), and the fallback after a failed pinning, are
// zeroed.
TEST(HostMemory, ZerosAreZeroOnEveryPath) {
  superoffload::log::init(superoffload::log::Level::error);
  for (const bool pin : {false, true}) {
    o::HostMemory memory(pin, int64_t{1} << 24);
    for (int round = 0; round < 3; ++round) {
      { auto dirty = at::empty({1 << 20}, at::kFloat).fill_(7.0f); }
      const auto t = memory.zeros({1 << 20}, at::kFloat);
      EXPECT_EQ(t.abs().max().item<float>(), 0.0f) << "pin " << pin << ", round " << round;
      const auto b = memory.zeros({1000, 3}, at::kBFloat16);
      EXPECT_EQ(b.to(at::kFloat).abs().max().item<float>(), 0.0f) << "pin " << pin << ", round " << round;
    }
  }
}
