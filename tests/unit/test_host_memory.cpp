// Host memory for device copies (the offloaded optimizer, activation checkpoints): pinned only when asked, refused with the reason
// when RLIMIT_MEMLOCK is too small, and a failed pinning (no GPU driver here) falls back to
// plain memory that works. Buffers come back resident, and base::populate_for_write makes
// exactly the whole pages of its range resident without changing what they hold.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "base/fresh_memory.hpp"
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

namespace {

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

// Which of `pages` pages from page-aligned `data` are resident (mincore).
std::vector<bool> resident(const void* data, size_t pages) {
  std::vector<unsigned char> in(pages);
  EXPECT_EQ(::mincore(const_cast<void*>(data), pages * kPage, in.data()), 0);
  std::vector<bool> out(pages);
  for (size_t i = 0; i < pages; ++i) out[i] = in[i] & 1;
  return out;
}

}  // namespace

TEST(FreshMemory, PopulatesTheWholePagesOfItsRangeAndKeepsTheirContents) {
  constexpr size_t kPages = 64;
  auto* data = static_cast<char*>(::mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(data, MAP_FAILED);
  // From the middle of page 2 to the middle of page 60: pages 3..59 are wholly inside.
  if (!superoffload::base::populate_for_write(data + 2 * kPage + 100, 58 * kPage)) {
    ::munmap(data, kPages * kPage);
    GTEST_SKIP() << "this kernel cannot populate (MADV_POPULATE_WRITE needs Linux 5.14); writes fault pages in instead";
  }
  const auto after = resident(data, kPages);
  for (size_t p = 0; p < kPages; ++p) EXPECT_EQ(after[p], p >= 3 && p <= 59) << "page " << p;
  for (size_t p = 3; p <= 59; ++p) EXPECT_EQ(data[p * kPage + 7], 0) << "a fresh page is zero";
  // Pages written before keep what they hold.
  std::memset(data, 0x5a, kPages * kPage);
  EXPECT_TRUE(superoffload::base::populate_for_write(data, kPages * kPage));
  for (size_t p = 0; p < kPages; ++p) EXPECT_EQ(data[p * kPage + kPage / 2], 0x5a) << "page " << p;
  ::munmap(data, kPages * kPage);
}

// The pieces tile the range exactly once, in any order the threads take them, and are cut at
// absolute 2 MiB boundaries: a range that starts and ends off those boundaries (and off a
// page) gets a short first and last piece, and every piece but those is 2 MiB, so no page is
// shared by two pieces. An empty range calls nothing.
TEST(FreshMemory, PageChunksTileTheRangeAtAbsoluteHugePageBoundaries) {
  constexpr uintptr_t kChunk = uintptr_t{2} << 20;
  std::vector<char> memory(5 * kChunk + 3 * kPage);
  auto* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(memory.data()) + kChunk - 1) / kChunk * kChunk);
  for (const auto& [offset, bytes] : std::vector<std::pair<size_t, size_t>>{
           {100, 3 * kChunk + 5000}, {0, 2 * kChunk}, {kChunk - 1, 2}, {7, 10}, {kPage, 0}}) {
    for (const int threads : {1, 2, 3}) {
      std::mutex mutex;
      std::vector<std::pair<uintptr_t, uintptr_t>> pieces;
      superoffload::base::for_each_page_chunk(base + offset, bytes, threads, [&](char* at, size_t length) {
        std::lock_guard lock(mutex);
        pieces.emplace_back(reinterpret_cast<uintptr_t>(at), reinterpret_cast<uintptr_t>(at) + length);
      });
      std::sort(pieces.begin(), pieces.end());
      const auto begin = reinterpret_cast<uintptr_t>(base + offset);
      uintptr_t next = begin;
      for (const auto& [from, to] : pieces) {
        EXPECT_EQ(from, next) << "offset " << offset << ", " << threads << " thread(s): a gap or an overlap";
        EXPECT_LT(from, to);
        EXPECT_EQ((to - 1) / kChunk, from / kChunk) << "a piece crosses a 2 MiB boundary";
        if (from != begin) EXPECT_EQ(from % kChunk, 0u) << "a piece that is not the first starts off a boundary";
        next = to;
      }
      EXPECT_EQ(next, begin + bytes) << "offset " << offset << ", " << threads << " thread(s): the end not reached";
      if (bytes == 0) EXPECT_TRUE(pieces.empty());
    }
  }
}

// A plain buffer (a CPU run's optimizer state) is resident when it is returned: its pages were
// made by the rank's threads, not left to whichever thread writes them first.
TEST(HostMemory, PlainBuffersAreResidentWhenReturned) {
  o::HostMemory memory(false, int64_t{1} << 26);
  for (const bool zeroed : {false, true}) {
    const auto t = zeroed ? memory.zeros({int64_t{1} << 24}, at::kFloat) : memory.empty({int64_t{1} << 24}, at::kFloat);
    const auto begin = (reinterpret_cast<uintptr_t>(t.data_ptr()) + kPage - 1) / kPage * kPage;
    const auto end = (reinterpret_cast<uintptr_t>(t.data_ptr()) + t.nbytes()) / kPage * kPage;
    const auto pages = resident(reinterpret_cast<void*>(begin), (end - begin) / kPage);
    size_t missing = 0;
    for (const bool in : pages) missing += !in;
    EXPECT_EQ(missing, 0u) << (zeroed ? "zeros" : "empty") << ": " << missing << " of " << pages.size() << " pages not resident";
  }
}

// Buffers cut from a reserved region: resident and zero (a fresh mapping), each at a 256-byte
// boundary and apart from the others; one that no longer fits is made on its own (zeroed as
// well); the region stays mapped while a buffer cut from it lives, after the HostMemory is gone.
TEST(HostMemory, ReservedRegionHandsOutZeroedResidentBuffersAndOutlivesItsOwner) {
  superoffload::log::init(superoffload::log::Level::error);
  for (const bool pin : {false, true}) {
    at::Tensor kept;
    {
      o::HostMemory memory(pin, int64_t{1} << 24);
      const int64_t floats = 1000003;  // not a multiple of the boundary
      memory.reserve(2 * floats * 4 + 3 * 4001 * 2, 5);
      std::vector<at::Tensor> buffers{memory.zeros({floats}, at::kFloat), memory.empty({floats}, at::kFloat)};
      for (int i = 0; i < 3; ++i) buffers.push_back(memory.zeros({4001}, at::kBFloat16));
      buffers.push_back(memory.zeros({1 << 20}, at::kFloat));  // beyond the region: mapped on its own
      for (size_t i = 0; i < buffers.size(); ++i) {
        const auto& t = buffers[i];
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 256, 0u) << "buffer " << i;
        EXPECT_EQ(t.to(at::kFloat).abs().max().item<float>(), 0.0f) << "buffer " << i << ", pin " << pin;
        const auto begin = (reinterpret_cast<uintptr_t>(t.data_ptr()) + kPage - 1) / kPage * kPage;
        const auto end = (reinterpret_cast<uintptr_t>(t.data_ptr()) + t.nbytes()) / kPage * kPage;
        if (end > begin) {
          size_t missing = 0;
          for (const bool in : resident(reinterpret_cast<void*>(begin), (end - begin) / kPage)) missing += !in;
          EXPECT_EQ(missing, 0u) << "buffer " << i << " not resident";
        }
        for (size_t j = 0; j < i; ++j) {
          const auto* a = static_cast<const char*>(t.data_ptr());
          const auto* b = static_cast<const char*>(buffers[j].data_ptr());
          EXPECT_TRUE(a + t.nbytes() <= b || b + buffers[j].nbytes() <= a) << "buffers " << j << " and " << i << " overlap";
        }
      }
      for (size_t i = 1; i < 5; ++i) {  // cut one after the other from the one region
        const auto end = reinterpret_cast<uintptr_t>(buffers[i - 1].data_ptr()) + buffers[i - 1].nbytes();
        EXPECT_EQ(reinterpret_cast<uintptr_t>(buffers[i].data_ptr()), (end + 255) / 256 * 256) << "buffer " << i;
      }
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].fill_(static_cast<double>(i + 1));
      for (size_t i = 0; i < buffers.size(); ++i) {
        EXPECT_EQ(buffers[i].to(at::kFloat).min().item<float>(), static_cast<float>(i + 1)) << "buffer " << i << " overwritten";
      }
      kept = buffers[2];
    }
    kept.fill_(9.0f);  // the HostMemory and the other buffers are gone; this one's region is not
    EXPECT_EQ(kept.to(at::kFloat).sum().item<float>(), 9.0f * 4001);
  }
}
