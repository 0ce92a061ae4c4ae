// The engine's buffer cache: a given buffer comes back for the same size and type, never
// while something still views it, never across types, and not at all when disabled (GPU).
#include <gtest/gtest.h>

#include "zero/buffer_cache.hpp"

namespace z = superoffload::zero;

namespace {

const auto kFloat = at::TensorOptions().dtype(at::kFloat);

TEST(BufferCache, ReusesAGivenBufferOfTheSameSizeAndType) {
  z::BufferCache cache(true, 4);
  auto a = cache.take(1000, kFloat);
  const void* memory = a.data_ptr();
  cache.give(std::move(a));
  EXPECT_EQ(cache.free_buffers(), 1u);
  EXPECT_NE(cache.take(1000, kFloat.dtype(at::kBFloat16)).data_ptr(), memory);  // other type
  EXPECT_NE(cache.take(999, kFloat).data_ptr(), memory);                         // other size
  EXPECT_EQ(cache.take(1000, kFloat).data_ptr(), memory);
  EXPECT_EQ(cache.free_buffers(), 0u);
}

TEST(BufferCache, KeepsNoBufferThatIsStillViewed) {
  z::BufferCache cache(true, 4);
  auto a = cache.take(1000, kFloat);
  const auto view = a.narrow(0, 10, 10);  // e.g. a parameter bound to the gathered layer
  cache.give(std::move(a));
  EXPECT_EQ(cache.free_buffers(), 0u);
  EXPECT_NE(cache.take(1000, kFloat).data_ptr(), view.data_ptr<float>() - 10);
}

TEST(BufferCache, DropsTheOldestPastItsLimitAndNothingWhenDisabled) {
  z::BufferCache cache(true, 2);
  for (int i = 0; i < 3; ++i) cache.give(at::empty({100 + i}, kFloat));
  EXPECT_EQ(cache.free_buffers(), 2u);
  cache.take(100, kFloat);  // the first was dropped: a new one
  EXPECT_EQ(cache.free_buffers(), 2u);
  cache.take(101, kFloat);  // kept
  EXPECT_EQ(cache.free_buffers(), 1u);
  z::BufferCache off(false, 4);
  off.give(off.take(1000, kFloat));
  EXPECT_EQ(off.free_buffers(), 0u);
}

}  // namespace
