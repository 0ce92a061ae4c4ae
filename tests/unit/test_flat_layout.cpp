// The flat layout: offsets in order, padding to a multiple of the world size, and shard
// pieces that cover every element exactly once.
#include <gtest/gtest.h>

#include "zero/flat_layout.hpp"

namespace z = superoffload::zero;

namespace {

std::vector<z::ParameterSlot> slots(std::vector<int64_t> sizes) {
  std::vector<z::ParameterSlot> out;
  for (size_t i = 0; i < sizes.size(); ++i) out.push_back({"p" + std::to_string(i), {sizes[i]}, sizes[i], 0, true});
  return out;
}

TEST(FlatLayout, OffsetsAndPadding) {
  z::FlatLayout layout(slots({10, 3, 7}), 4);
  EXPECT_EQ(layout.numel(), 20);
  EXPECT_EQ(layout.shard_numel(), 5);
  EXPECT_EQ(layout.padded_numel(), 20);
  EXPECT_EQ(layout.parameters()[2].offset, 13);
  z::FlatLayout odd(slots({10, 3, 8}), 4);
  EXPECT_EQ(odd.shard_numel(), 6);
  EXPECT_EQ(odd.padded_numel(), 24);
}

TEST(FlatLayout, PiecesCoverEveryElementOnce) {
  for (int world : {1, 2, 3, 4, 7}) {
    z::FlatLayout layout(slots({10, 1, 3, 17, 2}), world);
    std::vector<int> seen(static_cast<size_t>(layout.numel()), 0);
    for (int r = 0; r < world; ++r) {
      for (const auto& piece : layout.pieces(r)) {
        EXPECT_LE(piece.shard_offset + piece.length, layout.shard_numel());
        const auto& p = layout.parameters()[piece.parameter];
        for (int64_t i = 0; i < piece.length; ++i) {
          ++seen[static_cast<size_t>(p.offset + piece.parameter_offset + i)];
          EXPECT_EQ(layout.shard_begin(r) + piece.shard_offset + i, p.offset + piece.parameter_offset + i);
        }
      }
    }
    for (int count : seen) EXPECT_EQ(count, 1) << "world " << world;
  }
}

}  // namespace
