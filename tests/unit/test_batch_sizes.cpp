// DeepSpeed's batch-size derivation for each combination of set keys.
#include <gtest/gtest.h>

#include "config/batch_sizes.hpp"
#include "config/suggest.hpp"

using superoffload::config::BatchSizes;
using superoffload::config::resolve_batch_sizes;

namespace {

BatchSizes resolved(BatchSizes in, int world) {
  std::string problem;
  EXPECT_TRUE(resolve_batch_sizes(in, world, &problem)) << problem;
  return in;
}

TEST(BatchSizes, EachCombination) {
  auto r = resolved({0, 0, 0}, 4);
  EXPECT_EQ(r.train_batch_size, 4);
  EXPECT_EQ(r.micro_batch, 1);
  EXPECT_EQ(r.accumulation, 1);
  r = resolved({32, 0, 0}, 4);
  EXPECT_EQ(r.micro_batch, 8);
  EXPECT_EQ(r.accumulation, 1);
  r = resolved({32, 2, 0}, 4);
  EXPECT_EQ(r.accumulation, 4);
  r = resolved({32, 0, 2}, 4);
  EXPECT_EQ(r.micro_batch, 4);
  r = resolved({0, 2, 3}, 4);
  EXPECT_EQ(r.train_batch_size, 24);
  r = resolved({0, 2, 0}, 4);
  EXPECT_EQ(r.train_batch_size, 8);
  EXPECT_EQ(r.accumulation, 1);
  r = resolved({24, 2, 3}, 4);
  EXPECT_EQ(r.train_batch_size, 24);
}

TEST(BatchSizes, InconsistentOrIndivisibleIsRefused) {
  std::string problem;
  BatchSizes s{30, 2, 2};
  EXPECT_FALSE(resolve_batch_sizes(s, 4, &problem));
  EXPECT_NE(problem.find("2 x 2 x 4 = 16"), std::string::npos) << problem;
  s = {30, 4, 0};
  EXPECT_FALSE(resolve_batch_sizes(s, 4, &problem));
  EXPECT_NE(problem.find("not a multiple"), std::string::npos) << problem;
  s = {6, 0, 0};
  EXPECT_FALSE(resolve_batch_sizes(s, 4, &problem));
}

TEST(Suggest, EditDistanceAndClosest) {
  using superoffload::config::closest;
  using superoffload::config::edit_distance;
  EXPECT_EQ(edit_distance("sub_grup_size", "sub_group_size"), 1u);
  EXPECT_EQ(edit_distance("ratoi", "ratio"), 1u);  // a transposition is one edit
  EXPECT_EQ(closest("sub_grup_size", {"stage", "sub_group_size", "reduce_bucket_size"}), "sub_group_size");
  EXPECT_EQ(closest("lr", {"bf16", "eps"}), "");
}

}  // namespace
