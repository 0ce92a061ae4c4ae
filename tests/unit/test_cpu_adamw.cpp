// The SIMD CPU AdamW passes (step, redo, undo) equal their scalar reference bit for bit (fp32
// master, moments and the bf16 copy; also with bf16 moments) for sizes that are not multiples
// of the vector width, in AdamW and Adam (L2) modes, over several steps; one step also matches
// a double-precision hand computation. Redo gives the step taken directly with the clipped
// gradient, undo the state before the step. Stochastic rounding of bf16 moments is unbiased,
// independent of how the work is split, and lets exp_avg_sq decay where round-to-nearest
// would freeze it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include <hwy/targets.h>

#include "comm/bf16.hpp"
#include "optim/cpu_adamw.hpp"
#include "optim/pooled_norm.hpp"
#include "optim/thread_pool.hpp"

namespace o = superoffload::optim;

namespace {

using superoffload::comm::bf16_to_float;
using superoffload::comm::float_to_bf16;

struct State {
  std::vector<float> p, m, v, g;
  std::vector<uint16_t> bf16, m16, v16;  // bf16 copy; bf16 moments
  explicit State(size_t n, uint64_t seed) : p(n), m(n), v(n), g(n), bf16(n), m16(n), v16(n) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) {
      p[i] = normal(rng) * (i % 7 == 0 ? 100.0f : 0.05f);  // mixed magnitudes
      g[i] = normal(rng) * (i % 5 == 0 ? 1e-6f : 0.1f);
    }
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_simd_equals_scalar();

// Every SIMD target this machine can run (AVX-512, AVX2, SSE4, …), forced one at a time.
TEST(CpuAdamW, SimdEqualsScalarBitForBitOnEveryTarget) {
  const int64_t supported = static_cast<int64_t>(hwy::SupportedTargets());
  int tested = 0;
  for (int64_t target = 1; target != 0 && target <= supported; target <<= 1) {
    if (!(target & supported & static_cast<int64_t>(HWY_TARGETS))) continue;
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    std::printf("target %s (dispatched: %s)\n", hwy::TargetName(target), o::adamw_target().c_str());
    expect_simd_equals_scalar();
    ++tested;
  }
  hwy::SetSupportedTargetsForTest(0);  // back to the real dispatch
  EXPECT_GE(tested, 1);
}

// Steps 1–4 of every pass in turn (a step, then a redo with clipping, then an undo, …), with
// fp32 and with bf16 moments.
void expect_simd_equals_scalar() {
  const o::AdamWPass passes[] = {o::AdamWPass::step, o::AdamWPass::redo, o::AdamWPass::undo, o::AdamWPass::step};
  for (size_t n : {0, 1, 3, 7, 15, 16, 17, 31, 33, 63, 65, 100, 1027, 4099}) {
    for (bool decoupled : {true, false}) {
      State simd(n, n), scalar(n, n);
      for (int64_t step = 1; step <= 4; ++step) {
        const o::AdamWPass pass = passes[step - 1];
        o::AdamWStep s{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, decoupled, step};
        s.grad_scale = pass == o::AdamWPass::undo ? 1.0f : 0.37f;
        SCOPED_TRACE("n " + std::to_string(n) + " step " + std::to_string(step) + " decoupled " +
                     std::to_string(decoupled) + " pass " + std::to_string(static_cast<int>(pass)));
        o::adamw_pass(pass, s, simd.p.data(), simd.m.data(), simd.v.data(), simd.g.data(), simd.bf16.data(), n);
        o::adamw_pass_scalar(pass, s, scalar.p.data(), scalar.m.data(), scalar.v.data(), scalar.g.data(),
                             scalar.bf16.data(), n);
        ASSERT_TRUE(same_bits(simd.p, scalar.p));
        ASSERT_TRUE(same_bits(simd.m, scalar.m));
        ASSERT_TRUE(same_bits(simd.v, scalar.v));
        ASSERT_EQ(simd.bf16, scalar.bf16);
        const o::RoundingStream rounding{o::moment_rounding_key(n, step), 1000 * n};
        o::adamw_pass(pass, s, simd.p.data(), simd.m16.data(), simd.v16.data(), simd.g.data(), simd.bf16.data(), n,
                      rounding);
        o::adamw_pass_scalar(pass, s, scalar.p.data(), scalar.m16.data(), scalar.v16.data(), scalar.g.data(),
                             scalar.bf16.data(), n, rounding);
        ASSERT_TRUE(same_bits(simd.p, scalar.p)) << "bf16 moments";
        ASSERT_EQ(simd.m16, scalar.m16) << "bf16 moments";
        ASSERT_EQ(simd.v16, scalar.v16) << "bf16 moments";
        ASSERT_EQ(simd.bf16, scalar.bf16) << "bf16 moments";
      }
    }
  }
}

// The random bits depend on the element's position, not on how the pool cut the range.
TEST(CpuAdamW, Bf16MomentsDoNotDependOnChunking) {
  const size_t n = 1000;
  State whole(n, 5), pieces(n, 5);
  const o::AdamWStep s{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, true, 3};
  const uint32_t key = o::moment_rounding_key(42, 3);
  o::adamw_pass(o::AdamWPass::step, s, whole.p.data(), whole.m16.data(), whole.v16.data(), whole.g.data(), nullptr, n,
                {key, 0});
  for (size_t b = 0; b < n; b += 77) {
    const size_t e = std::min(n, b + 77);
    o::adamw_pass(o::AdamWPass::step, s, pieces.p.data() + b, pieces.m16.data() + b, pieces.v16.data() + b,
                  pieces.g.data() + b, nullptr, e - b, {key, b});
  }
  EXPECT_EQ(whole.m16, pieces.m16);
  EXPECT_EQ(whole.v16, pieces.v16);
  EXPECT_TRUE(same_bits(whole.p, pieces.p));
}

// Stochastic rounding lands on one of the two neighbours, and on average on the value itself.
TEST(CpuAdamW, StochasticRoundingIsUnbiased) {
  for (float x : {1.0f + 1.0f / 1024, 3.14159f, -2.7182818f, 1e-20f, 0.3333333f}) {
    const float down = bf16_to_float(static_cast<uint16_t>(float_to_bf16(x) - (bf16_to_float(float_to_bf16(x)) > x)));
    double sum = 0;
    const int draws = 1 << 16;
    for (int r = 0; r < draws; ++r) {
      const float y = bf16_to_float(o::bf16_round_stochastic(x, static_cast<uint32_t>(r)));
      ASSERT_TRUE(y == down || std::nextafter(down, INFINITY) <= y) << x;
      sum += y;
    }
    EXPECT_NEAR(sum / draws, x, std::fabs(x) * 1e-6) << x;  // every 16-bit pattern once: exact up to float
  }
  EXPECT_TRUE(std::isnan(bf16_to_float(o::bf16_round_stochastic(std::nanf(""), 0xffff))));
  EXPECT_EQ(o::bf16_round_stochastic(INFINITY, 0xffff), 0x7f80);
}

// With no gradient, exp_avg_sq must decay by β2 per step. Its per-step change (0.1%) is below
// half a bf16 ulp, so round-to-nearest would keep it constant for ever; stochastic rounding
// decays it on average at the right rate.
TEST(CpuAdamW, Bf16SecondMomentDecaysUnderStochasticRounding) {
  const size_t n = 4096;
  State s(n, 9);
  std::fill(s.g.begin(), s.g.end(), 0.0f);
  std::fill(s.v16.begin(), s.v16.end(), float_to_bf16(1.0f));
  for (int64_t step = 1; step <= 1000; ++step) {
    const o::AdamWStep a{1e-6f, 0.9f, 0.999f, 1e-8f, 0.0f, true, step};
    o::adamw_pass(o::AdamWPass::step, a, s.p.data(), s.m16.data(), s.v16.data(), s.g.data(), nullptr, n,
                  {o::moment_rounding_key(0, step), 0});
  }
  double mean = 0;
  for (uint16_t v : s.v16) mean += bf16_to_float(v) / n;
  EXPECT_NEAR(mean, std::pow(0.999, 1000), 0.02);  // 0.368; round-to-nearest would leave 1.0
}

// Undoing a step with the same gradient gives back the state before it.
TEST(CpuAdamW, UndoInvertsAStep) {
  for (bool decoupled : {true, false}) {
    State s(1000, 11);
    for (size_t i = 0; i < s.m.size(); ++i) {
      s.m[i] = 0.01f * s.g[i];
      s.v[i] = 1e-4f * s.g[i] * s.g[i] + 1e-12f;
    }
    const auto p0 = s.p, m0 = s.m, v0 = s.v;
    const o::AdamWStep a{1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, decoupled, 5};
    o::adamw_update(a, s.p.data(), s.m.data(), s.v.data(), s.g.data(), nullptr, s.p.size());
    o::adamw_pass(o::AdamWPass::undo, a, s.p.data(), s.m.data(), s.v.data(), s.g.data(), nullptr, s.p.size());
    for (size_t i = 0; i < s.p.size(); ++i) {
      ASSERT_NEAR(s.p[i], p0[i], 1e-6f * std::max(1.0f, std::fabs(p0[i]))) << i;
      // Recovering m subtracts (1 − β1)·g from the new m (g with the L2 term in Adam mode):
      // the round-off scales with both.
      const float g = std::fabs(decoupled ? s.g[i] : s.g[i] + 0.1f * p0[i]);
      ASSERT_NEAR(s.m[i], m0[i], 1e-6f * (std::fabs(m0[i]) + g)) << i;
      ASSERT_NEAR(s.v[i], v0[i], 1e-6f * (std::fabs(v0[i]) + g * g)) << i;
    }
  }
}

// A speculated step (unscaled gradient) redone with the clipping coefficient equals the step
// taken directly with the clipped gradient, to fp32 round-off.
TEST(CpuAdamW, RedoEqualsTheClippedStepTakenDirectly) {
  for (bool decoupled : {true, false}) {
    for (float scale : {0.02f, 0.5f, 0.999f}) {
      State speculated(1000, 13), direct(1000, 13);
      for (size_t i = 0; i < speculated.m.size(); ++i) {
        speculated.m[i] = direct.m[i] = 0.01f * speculated.g[i];
        speculated.v[i] = direct.v[i] = 1e-4f * speculated.g[i] * speculated.g[i] + 1e-12f;
      }
      o::AdamWStep a{1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, decoupled, 5};
      o::adamw_update(a, speculated.p.data(), speculated.m.data(), speculated.v.data(), speculated.g.data(), nullptr,
                      1000);
      a.grad_scale = scale;
      o::adamw_pass(o::AdamWPass::redo, a, speculated.p.data(), speculated.m.data(), speculated.v.data(),
                    speculated.g.data(), speculated.bf16.data(), 1000);
      o::adamw_update(a, direct.p.data(), direct.m.data(), direct.v.data(), direct.g.data(), direct.bf16.data(), 1000);
      for (size_t i = 0; i < 1000; ++i) {
        const float g = std::fabs(decoupled ? direct.g[i] : direct.g[i] + 0.1f * direct.p[i]);
        ASSERT_NEAR(speculated.p[i], direct.p[i], 1e-6f * std::max(1.0f, std::fabs(direct.p[i]))) << i;
        ASSERT_NEAR(speculated.m[i], direct.m[i], 1e-6f * (std::fabs(direct.m[i]) + g)) << i;
        ASSERT_NEAR(speculated.v[i], direct.v[i], 1e-6f * (std::fabs(direct.v[i]) + g * g)) << i;
        ASSERT_EQ(speculated.bf16[i], float_to_bf16(speculated.p[i]));
      }
    }
  }
}

TEST(CpuAdamW, OneStepMatchesAHandComputation) {
  State s(5, 3);
  const auto p0 = s.p, g = s.g;
  o::AdamWStep step{2e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, true, 1};
  o::adamw_update(step, s.p.data(), s.m.data(), s.v.data(), s.g.data(), s.bf16.data(), 5);
  for (size_t i = 0; i < 5; ++i) {
    // First step: m̂ = g, v̂ = g², so p ← p(1 − lr·wd) − lr · g / (|g| + ε).
    const double expected = p0[i] * (1 - 2e-3 * 0.01) - 2e-3 * g[i] / (std::fabs(g[i]) + 1e-8);
    EXPECT_NEAR(s.p[i], expected, 1e-6 * std::max(1.0, std::fabs(expected)));
    EXPECT_EQ(s.bf16[i], superoffload::comm::float_to_bf16(s.p[i]));
  }
}

TEST(CpuAdamW, NonFiniteValuesStayNonFinite) {
  State simd(40, 1), scalar(40, 1);
  simd.g[3] = scalar.g[3] = std::nanf("");
  simd.g[21] = scalar.g[21] = INFINITY;
  o::AdamWStep s;
  o::adamw_update(s, simd.p.data(), simd.m.data(), simd.v.data(), simd.g.data(), simd.bf16.data(), 40);
  o::adamw_pass_scalar(o::AdamWPass::step, s, scalar.p.data(), scalar.m.data(), scalar.v.data(), scalar.g.data(),
                       scalar.bf16.data(), 40);
  EXPECT_TRUE(std::isnan(simd.p[3]));
  EXPECT_TRUE(std::isnan(superoffload::comm::bf16_to_float(simd.bf16[3])));
  EXPECT_EQ(simd.bf16, scalar.bf16);
}

TEST(ThreadPool, BlocksCoverTheRangeOnceAligned) {
  o::ThreadPool pool(3, {});
  EXPECT_EQ(pool.size(), 3u);
  for (size_t n : {0, 1, 64, 1000, 4097}) {
    std::vector<int> hits(n, 0);
    std::mutex m;
    std::set<size_t> starts;
    pool.parallel_for(n, 16, [&](size_t begin, size_t end) {
      std::lock_guard lock(m);
      starts.insert(begin);
      for (size_t i = begin; i < end; ++i) ++hits[i];
    });
    for (int h : hits) ASSERT_EQ(h, 1);
    for (size_t s : starts) {
      EXPECT_EQ(s % 16, 0u);
      EXPECT_EQ(s % pool.block_size(n, 16), 0u) << "block i begins at i * block_size";
      EXPECT_LT(s / pool.block_size(n, 16), pool.size());
    }
  }
}

// The blocks' sums are added in block order whichever thread finishes first. The data make the
// order visible: block 0 sums to 2^53 exactly, the six others to 1 each; in order each 1 is
// lost to rounding (2^53 + 1 rounds to even, 2^53), while two of them added together first
// survive (2^53 + 2). Not finite data give +inf.
TEST(PooledNorm, BlocksAreAddedInOrderEveryCall) {
  o::ThreadPool pool(7, {});
  const size_t n = 7 * 64;
  ASSERT_EQ(pool.block_size(n, 64), 64u);
  std::vector<float> data(n, 0.0f);
  data[0] = data[1] = 67108864.0f;  // 2^26: squares 2^52 each
  for (size_t b = 1; b < 7; ++b) data[b * 64 + 5] = 1.0f;
  for (int call = 0; call < 300; ++call) {
    ASSERT_EQ(o::squared_norm(pool, data.data(), n), 9007199254740992.0) << "call " << call;
  }
  data[200] = std::nanf("");
  EXPECT_EQ(o::squared_norm(pool, data.data(), n), INFINITY);
  EXPECT_EQ(o::squared_norm(pool, data.data(), 0), 0.0);
}

}  // namespace
