// Parts of the training loop: the distributed sampler (disjoint, deterministic, resumable),
// the learning-rate schedules, the FLOP accounting (model and hardware FLOPs against hand
// computations, dense and MoE, with and without checkpointing) and the step line's format.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "data/sampler.hpp"
#include "train/lr_schedule.hpp"
#include "train/lr_suggestion.hpp"
#include "train/step_log.hpp"
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

// DeepSpeed's LRRangeTest: min_lr · (1 + rate · k / size), k the 0-based step; staircase
// rounds k / size down. The optimizer's lr plays no part.
TEST(LrSchedule, RangeTestFollowsDeepSpeed) {
  superoffload::config::LrScheduleConfig s;
  s.type = superoffload::config::LrScheduleType::lr_range_test;
  s.lr_range_test_min_lr = 1e-4;
  s.lr_range_test_step_size = 4;
  s.lr_range_test_step_rate = 2.0;
  const t::LrSchedule continuous(s, 123.0, 100);
  EXPECT_DOUBLE_EQ(continuous.at(0), 1e-4);
  EXPECT_DOUBLE_EQ(continuous.at(2), 1e-4 * (1 + 2.0 * 0.5));
  EXPECT_DOUBLE_EQ(continuous.at(10), 1e-4 * (1 + 2.0 * 2.5));
  s.lr_range_test_staircase = true;
  const t::LrSchedule staircase(s, 123.0, 100);
  EXPECT_DOUBLE_EQ(staircase.at(3), 1e-4);
  EXPECT_DOUBLE_EQ(staircase.at(4), 1e-4 * 3);
  EXPECT_DOUBLE_EQ(staircase.at(10), 1e-4 * 5);
}

// The suggestion: the steepest fall of the smoothed loss against log(lr), before divergence.
TEST(LrSuggestion, SteepestFallBeforeDivergence) {
  std::vector<double> lr, loss;
  for (int k = 0; k < 60; ++k) {
    lr.push_back(1e-5 * std::pow(10.0, k / 15.0));  // 1e-5 .. ~1e-1, log-spaced
    const double x = std::log10(lr.back());          // -5 .. -1.07
    // Flat, a steep fall centred at lr 1e-3, flat again, then divergence past 3e-2.
    loss.push_back(x < -1.5 ? 3.0 - std::tanh(3 * (x + 3)) : 50.0);
  }
  const auto s = t::suggest_lr(lr, loss);
  ASSERT_TRUE(s.found);
  EXPECT_NEAR(std::log10(s.steepest_lr), -3.0, 0.15);
  EXPECT_LT(s.used_steps, 60u) << "the diverged steps are left out";
  EXPECT_LT(s.min_loss_lr, 3.2e-2);
  EXPECT_FALSE(t::suggest_lr({1e-3, 2e-3, 3e-3}, {1, 1, 1}).found) << "too few steps";
}

// configs/tiny.toml on 2 ranks: the tiny Llama (9,641,856 parameters, 6 layers, hidden 384),
// seq 128, 8 samples per step, a 0.5 s step. By hand, per token:
//   forward  2·9,641,856 + 4·6·384·128 = 19,283,712 + 1,179,648 = 20,463,360
//   model    3 · forward = 61,390,080 (no recomputation, what MFU counts)
//   hardware 4 · forward = 81,853,440 with activation checkpointing, 61,390,080 without
// 1,024 tokens in 0.5 s: 2,048 tokens/s for the job, 1,024 per device.
TEST(Throughput, ModelAndHardwareFlopsOfADenseModelByHand) {
  const t::ThroughputInputs in{9641856.0, 6, 384, 128, true, 8, 2};
  EXPECT_DOUBLE_EQ(t::model_flops_per_token(in), 61390080.0);
  EXPECT_DOUBLE_EQ(t::hardware_flops_per_token(in), 81853440.0);
  const auto r = t::measure_throughput(in, 0.5, 100.0);
  EXPECT_DOUBLE_EQ(r.tokens_per_s, 2048.0);
  EXPECT_DOUBLE_EQ(r.tokens_per_s_per_device, 1024.0);
  EXPECT_DOUBLE_EQ(r.model_tflops, 61390080.0 * 2048 / 1e12);
  EXPECT_DOUBLE_EQ(r.model_tflops_per_device, 61390080.0 * 1024 / 1e12);
  EXPECT_DOUBLE_EQ(r.hardware_tflops_per_device, 81853440.0 * 1024 / 1e12);
  EXPECT_DOUBLE_EQ(r.mfu, 61390080.0 * 1024 / 1e12 / 100);
  EXPECT_DOUBLE_EQ(r.hfu, 81853440.0 * 1024 / 1e12 / 100);
  EXPECT_NEAR(r.hfu / r.mfu, 4.0 / 3.0, 1e-12);  // checkpointing: a third more executed than needed
  // The SuperOffload examples' figure, per sample (2·c·N·s + 4·c·L·h·s²)/1e12 with c = 4, times
  // samples per step over step time per device, is the hardware figure.
  const double examples = (2.0 * 4 * 9641856.0 * 128 + 4.0 * 4 * 6 * 384 * 128.0 * 128) / 1e12 * 8 / 0.5 / 2;
  EXPECT_DOUBLE_EQ(r.hardware_tflops_per_device, examples);

  t::ThroughputInputs no_checkpointing = in;
  no_checkpointing.activation_checkpointing = false;
  const auto plain = t::measure_throughput(no_checkpointing, 0.5, 100.0);
  EXPECT_DOUBLE_EQ(plain.model_tflops_per_device, r.model_tflops_per_device);  // the model did not change
  EXPECT_DOUBLE_EQ(plain.hardware_tflops_per_device, plain.model_tflops_per_device);
  EXPECT_DOUBLE_EQ(plain.hfu, plain.mfu);
}

// A mixture of experts counts the parameters a token passes through: Mixtral-8x7B's shape
// (46,702,792,704 parameters, 12,879,138,816 active, 32 layers, hidden 4096), seq 4096, 16
// samples on 8 devices, 10 s a step. Per token, by hand:
//   forward  2·12,879,138,816 + 4·32·4096·4096 = 25,758,277,632 + 2,147,483,648 = 27,905,761,280
//   model    83,717,283,840; hardware with checkpointing 111,623,045,120
// 65,536 tokens in 10 s: 6,553.6 tokens/s, 819.2 per device.
TEST(Throughput, AMixtureCountsActiveParametersOnly) {
  const t::ThroughputInputs in{12879138816.0, 32, 4096, 4096, true, 16, 8};
  EXPECT_DOUBLE_EQ(t::model_flops_per_token(in), 83717283840.0);
  EXPECT_DOUBLE_EQ(t::hardware_flops_per_token(in), 111623045120.0);
  const auto r = t::measure_throughput(in, 10.0, 989.0);
  EXPECT_DOUBLE_EQ(r.tokens_per_s_per_device, 819.2);
  EXPECT_NEAR(r.model_tflops_per_device, 83717283840.0 * 819.2 / 1e12, 1e-9);  // 68.58
  EXPECT_NEAR(r.mfu, 83717283840.0 * 819.2 / 1e12 / 989.0, 1e-12);           // 6.9 %
  t::ThroughputInputs no_checkpointing = in;
  no_checkpointing.activation_checkpointing = false;
  EXPECT_DOUBLE_EQ(t::hardware_flops_per_token(no_checkpointing), 83717283840.0);
}

TEST(Throughput, NoTimeNoFiguresAndKnownPeaks) {
  const t::ThroughputInputs in{9641856.0, 6, 384, 128, true, 8, 2};
  const auto none = t::measure_throughput(in, 0.0, 989.0);
  EXPECT_EQ(none.tokens_per_s, 0.0);
  EXPECT_EQ(none.mfu, 0.0);
  EXPECT_EQ(t::measure_throughput(in, 0.5, 0.0).mfu, 0.0);  // unknown peak (CPU): no MFU
  EXPECT_EQ(t::peak_tflops(0, "NVIDIA GH200 480GB"), 989.0);
  EXPECT_EQ(t::peak_tflops(123, "NVIDIA GH200 480GB"), 123.0);
  EXPECT_EQ(t::peak_tflops(0, ""), 0.0);
}

TEST(StepLine, ComparableDigitsAndLabelledUnits) {
  t::StepLine line{.step = 12, .total_steps = 100, .loss = 2.3456123, .lr = 1e-4, .grad_norm = 0.9131, .step_s = 0.9064};
  line.throughput = t::measure_throughput({9641856.0, 6, 384, 128, true, 32, 4}, 0.9064, 989.0);
  line.eta_s = 62;
  EXPECT_EQ(t::format_step_line(line),
            "Step 12/100 | Loss 2.34561 | LR 1.000e-04 | Grad norm 0.913 | Time 906 ms | Tokens/s 4519 (1130 per device) "
            "| TFLOPS 0.0694 per device, 0.277 job | MFU 0.0% | HFU 0.0% | ETA 0:01:02");
  line.throughput = t::measure_throughput({9641856.0, 6, 384, 128, true, 32, 4}, 0.9064, 0.0);
  line.loss = 10.82654321;
  EXPECT_EQ(t::format_step_line(line),
            "Step 12/100 | Loss 10.8265 | LR 1.000e-04 | Grad norm 0.913 | Time 906 ms | Tokens/s 4519 (1130 per device) "
            "| TFLOPS 0.0694 per device, 0.277 job | ETA 0:01:02");
  line.aux_loss = 2.01376543;  // a MoE run with output_router_logits
  EXPECT_EQ(t::format_step_line(line),
            "Step 12/100 | Loss 10.8265 | Aux loss 2.01377 | LR 1.000e-04 | Grad norm 0.913 | Time 906 ms | Tokens/s 4519 "
            "(1130 per device) | TFLOPS 0.0694 per device, 0.277 job | ETA 0:01:02");
  EXPECT_EQ(t::format_significant(123456.7, 3), "123457");
  EXPECT_EQ(t::format_significant(0.023449, 3), "0.0234");
}

// The wall-clock part of the breakdown: what each part's phases leave out. The CPU steps taken
// during backward run beside it on other threads, so only the late ones count against the
// optimizer part; the numbers are those of an H200 step before the norm moved (#31).
TEST(StepLine, BreakdownAccountsForTheWholeStep) {
  const superoffload::zero::PhaseTimes engine{.forward_s = 0.074, .backward_s = 0.187, .gather_wait_s = 0.002,
                                               .reduce_s = 0.035, .reduce_wait_s = 0.028};
  const superoffload::optim::OptimizerTimes optimizer{.cpu_step_s = 0.787, .cpu_late_s = 0.505, .device_step_s = 0.007,
                                                      .h2d_s = 0.022, .wait_s = 0.001, .norm_s = 1.019};
  const auto text = t::format_breakdown(engine, optimizer,
                                        {.step_s = 1.900, .data_s = 0.001, .forward_backward_s = 0.340, .optimizer_s = 1.554});
  EXPECT_NE(text.find("cpu_step 0.787 (after backward 0.505)"), std::string::npos) << text;
  EXPECT_NE(text.find("norm 1.019"), std::string::npos) << text;
  // forward/backward 0.340 - (0.074 + 0.187 + 0.002 + 0.035) = 0.042; optimizer 1.554 - 1.554 = 0;
  // the rest of the step 1.900 - 0.001 - 0.340 - 1.554 = 0.005.
  EXPECT_NE(text.find("; wall: data 0.001, forward/backward 0.340 (untimed 0.042), optimizer 1.554 (untimed 0.000), "
                      "rest of the step 0.005"),
            std::string::npos)
      << text;
}

}  // namespace
