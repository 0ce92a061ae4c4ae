// Parts of validation during training that need no model: the held-out share of a dataset
// (deterministic from the seed, disjoint, sized as HF's train_test_split rounds), the best
// eval loss and HF's early-stopping patience (with its threshold, non-finite losses and a
// round trip through the checkpoint manifest), and the eval part of the step line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "base/error.hpp"
#include "data/holdout.hpp"
#include "train/eval_tracker.hpp"
#include "train/step_log.hpp"

namespace d = superoffload::data;
namespace t = superoffload::train;

namespace {

TEST(HoldOut, DisjointCoveringSortedAndRoundedUp) {
  for (const auto& [samples, fraction, expected] :
       {std::tuple{1000, 0.1, 100}, {1250, 0.1, 125}, {7, 0.2, 2}, {3, 0.5, 2}, {10, 0.01, 1}, {30, 0.1, 3}}) {
    const auto split = d::hold_out(samples, fraction, 42);
    EXPECT_EQ(static_cast<int>(split.eval.size()), expected) << samples << " x " << fraction;
    EXPECT_EQ(split.train.size() + split.eval.size(), static_cast<size_t>(samples));
    EXPECT_TRUE(std::is_sorted(split.train.begin(), split.train.end()));
    EXPECT_TRUE(std::is_sorted(split.eval.begin(), split.eval.end()));
    std::set<int64_t> all(split.train.begin(), split.train.end());
    for (auto i : split.eval) EXPECT_TRUE(all.insert(i).second) << "sample " << i << " both trained on and held out";
    EXPECT_EQ(all.size(), static_cast<size_t>(samples));
    EXPECT_EQ(*all.rbegin(), samples - 1);
  }
}

TEST(HoldOut, SameSeedSameShareOtherSeedAnotherOne) {
  const auto a = d::hold_out(500, 0.1, 42), b = d::hold_out(500, 0.1, 42), c = d::hold_out(500, 0.1, 43);
  EXPECT_EQ(a.eval, b.eval);
  EXPECT_NE(a.eval, c.eval);
  // Not the first or last samples: a spread over the file (a contiguous tail would hold out
  // whatever the file ends with).
  EXPECT_LT(a.eval.front(), 100);
  EXPECT_GT(a.eval.back(), 400);
}

TEST(HoldOut, RefusesAShareThatLeavesNothingToTrainOn) {
  EXPECT_THROW(d::hold_out(1, 0.5, 42), superoffload::Error);
  EXPECT_THROW(d::hold_out(100, 0.0, 42), superoffload::Error);
}

TEST(EvalTracker, BestIsTheLowestAndPatienceCountsEvaluationsWithoutImprovement) {
  t::EvalTracker tracker(/*patience=*/2, /*threshold=*/0.0);
  auto d1 = tracker.observe(10, 3.0);
  EXPECT_TRUE(d1.best);
  EXPECT_FALSE(d1.stop);
  auto d2 = tracker.observe(20, 3.5);  // worse
  EXPECT_FALSE(d2.best);
  EXPECT_FALSE(d2.stop);
  EXPECT_EQ(tracker.state().without_improvement, 1);
  auto d3 = tracker.observe(30, 2.5);  // better: the count starts again
  EXPECT_TRUE(d3.best);
  EXPECT_EQ(tracker.state().without_improvement, 0);
  EXPECT_EQ(tracker.state().best_step, 30);
  EXPECT_FALSE(tracker.observe(40, 2.5).stop);  // equal is no improvement
  const auto d5 = tracker.observe(50, 2.6);
  EXPECT_TRUE(d5.stop);
  EXPECT_FALSE(d5.best);
  EXPECT_EQ(tracker.state().best_loss, 2.5);
  EXPECT_EQ(tracker.state().evaluations, 5);
}

TEST(EvalTracker, ThresholdGatesThePatienceNotTheBest) {
  t::EvalTracker tracker(1, 0.1);
  tracker.observe(1, 3.0);
  const auto small = tracker.observe(2, 2.95);  // lower, by less than the threshold
  EXPECT_TRUE(small.best);
  EXPECT_TRUE(small.stop);
  EXPECT_EQ(tracker.state().best_loss, 2.95);
}

TEST(EvalTracker, NonFiniteIsNeverBestAndCountsAsNoImprovement) {
  t::EvalTracker tracker(3, 0.0);
  const auto nan = tracker.observe(1, std::nan(""));
  EXPECT_FALSE(nan.best);
  EXPECT_TRUE(std::isnan(tracker.state().best_loss));
  EXPECT_EQ(tracker.state().without_improvement, 1);
  EXPECT_TRUE(tracker.observe(2, 4.0).best);
  EXPECT_FALSE(tracker.observe(3, std::numeric_limits<double>::infinity()).best);
  EXPECT_FALSE(tracker.observe(4, -std::numeric_limits<double>::infinity()).best);
  EXPECT_EQ(tracker.state().best_loss, 4.0);
  EXPECT_EQ(tracker.state().without_improvement, 2);
}

TEST(EvalTracker, NeverStopsWithoutPatience) {
  t::EvalTracker tracker(0, 0.0);
  tracker.observe(1, 1.0);
  for (int i = 2; i < 50; ++i) EXPECT_FALSE(tracker.observe(i, 2.0).stop);
}

TEST(EvalTracker, ManifestRoundTripIsExact) {
  t::EvalTracker tracker(4, 0.0);
  tracker.observe(0, 5.531377479553223);
  tracker.observe(3, 5.6);
  const auto json = nlohmann::json::parse(t::EvalTracker::to_json(tracker.state()).dump());
  const auto back = t::EvalTracker::from_json(json);
  EXPECT_EQ(back.best_loss, tracker.state().best_loss);  // bit for bit: a resume decides the same
  EXPECT_EQ(back.best_step, 0);
  EXPECT_EQ(back.without_improvement, 1);
  EXPECT_EQ(back.evaluations, 2);
  // Before any finite evaluation (null), and a manifest written before evaluations existed.
  const auto none = t::EvalTracker::from_json(nlohmann::json::parse(t::EvalTracker::to_json({}).dump()));
  EXPECT_TRUE(std::isnan(none.best_loss));
  EXPECT_EQ(none.best_step, -1);
  EXPECT_TRUE(std::isnan(t::EvalTracker::from_json(nlohmann::json()).best_loss));
}

TEST(StepLine, EvalLossAndPerplexity) {
  EXPECT_EQ(t::format_eval(2.41022345), " | Eval loss 2.41022 | ppl 11.14");
  t::StepLine line{.step = 3, .total_steps = 10, .loss = 4.6739, .lr = 3e-4, .grad_norm = 7.787, .step_s = 0.201};
  line.evaluated = true;
  line.eval_loss = 4.36881;
  const auto text = t::format_step_line(line);
  EXPECT_EQ(text.substr(text.size() - 31), "| Eval loss 4.36881 | ppl 78.95") << text;
  line.evaluated = false;
  EXPECT_EQ(t::format_step_line(line).find("Eval"), std::string::npos);
}

}  // namespace
