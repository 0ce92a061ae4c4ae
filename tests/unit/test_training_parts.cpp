// Parts of the training loop: the distributed sampler (disjoint, deterministic, resumable),
// the learning-rate schedules and the TFLOPS formula against a hand computation for the
// tiny demo model.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "data/sampler.hpp"
#include "train/lr_schedule.hpp"
#include "train/throughput.hpp"

namespace d = superoffload::data;
namespace t = superoffload::train;

namespace {

TEST(Sampler, RanksGetDisjointSlicesCoveringTheBatch) {
  const int world = 4;
  std::vector<d::DistributedSampler> samplers;
  for (int r = 0; r < world; ++r) samplers.emplace_back(1000, 5, true, world, r, 3, 2);
  for (int step = 0; step < 5; ++step) {
    std::set<int64_t> seen;
    for (auto& s : samplers) {
      for (const auto& micro : s.next()) {
        EXPECT_EQ(micro.size(), 3u);
        for (auto i : micro) EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
      }
    }
    EXPECT_EQ(seen.size(), 24u);
  }
}

TEST(Sampler, DeterministicAndResumableAtTheExactNextBatch) {
  d::DistributedSampler a(500, 9, true, 2, 1, 4, 1), b(500, 9, true, 2, 1, 4, 1);
  for (int i = 0; i < 70; ++i) a.next();  // past an epoch boundary (62 batches per epoch)
  const auto position = a.position();
  b.set_position(position);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next(), b.next());
  d::DistributedSampler c(500, 10, true, 2, 1, 4, 1), e(500, 9, true, 2, 1, 4, 1);
  EXPECT_NE(c.next(), e.next()) << "the seed must matter";
}

TEST(LrSchedule, WarmupThenDecay) {
  superoffload::config::LrScheduleConfig s;
  s.type = superoffload::config::LrScheduleType::cosine;
  s.warmup_num_steps = 10;
  s.min_lr = 1e-4;
  const t::LrSchedule cosine(s, 1e-3, 110);
  EXPECT_DOUBLE_EQ(cosine.at(0), 1e-4);            // (0 + 1) / 10 of the way from 0
  EXPECT_DOUBLE_EQ(cosine.at(9), 1e-3);
  EXPECT_DOUBLE_EQ(cosine.at(10), 1e-3);
  EXPECT_NEAR(cosine.at(60), 1e-4 + 0.9e-3 * 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(cosine.at(110), 1e-4);
  s.type = superoffload::config::LrScheduleType::linear;
  EXPECT_NEAR(t::LrSchedule(s, 1e-3, 110).at(60), 1e-4 + 0.9e-3 * 0.5, 1e-15);
  s.type = superoffload::config::LrScheduleType::constant;
  EXPECT_DOUBLE_EQ(t::LrSchedule(s, 1e-3, 110).at(100), 1e-3);
}

TEST(Throughput, TflopsFollowTheSuperOffloadFormula) {
  // configs/tiny.toml on 2 ranks: the tiny Llama (9,641,856 parameters, 6 layers, hidden
  // 384), seq 128, 4 samples per rank, activation checkpointing (c = 4).
  const t::ThroughputInputs in{9641856.0, 6, 384, 128, true, 8, 2};
  const double per_sample = (2.0 * 4 * 9641856.0 * 128 + 4.0 * 4 * 6 * 384 * 128.0 * 128) / 1e12;
  EXPECT_DOUBLE_EQ(t::tflops_per_sample(in), per_sample);
  EXPECT_DOUBLE_EQ(t::tflops_per_device(in, 0.5), per_sample * 8 / 0.5 / 2);
  // By hand: 2·4·9,641,856·128 = 9,873,260,544 and 4·4·6·384·128² = 603,979,776 FLOPs.
  EXPECT_DOUBLE_EQ(t::tflops_per_sample(in), 10477240320.0 / 1e12);
  t::ThroughputInputs no_checkpointing = in;
  no_checkpointing.activation_checkpointing = false;
  EXPECT_DOUBLE_EQ(t::tflops_per_sample(no_checkpointing), per_sample * 3 / 4);
  EXPECT_EQ(t::peak_tflops(0, "NVIDIA GH200 480GB"), 989.0);
  EXPECT_EQ(t::peak_tflops(123, "NVIDIA GH200 480GB"), 123.0);
  EXPECT_EQ(t::peak_tflops(0, ""), 0.0);
}

}  // namespace
