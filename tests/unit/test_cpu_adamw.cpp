// The SIMD CPU AdamW equals its scalar reference bit for bit (fp32 master, moments and the
// bf16 copy) for sizes that are not multiples of the vector width, in AdamW and Adam (L2)
// modes, over several steps; one step also matches a double-precision hand computation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include <hwy/targets.h>

#include "comm/bf16.hpp"
#include "optim/cpu_adamw.hpp"
#include "optim/thread_pool.hpp"

namespace o = superoffload::optim;

namespace {

struct State {
  std::vector<float> p, m, v, g;
  std::vector<uint16_t> bf16;
  explicit State(size_t n, uint64_t seed) : p(n), m(n), v(n), g(n), bf16(n) {
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

void expect_simd_equals_scalar() {
  for (size_t n : {0, 1, 3, 7, 15, 16, 17, 31, 33, 63, 65, 100, 1027, 4099}) {
    for (bool decoupled : {true, false}) {
      State simd(n, n), scalar(n, n);
      for (int64_t step = 1; step <= 4; ++step) {
        o::AdamWStep s{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, decoupled, step};
        o::adamw_update(s, simd.p.data(), simd.m.data(), simd.v.data(), simd.g.data(), simd.bf16.data(), n);
        o::adamw_update_scalar(s, scalar.p.data(), scalar.m.data(), scalar.v.data(), scalar.g.data(),
                               scalar.bf16.data(), n);
        ASSERT_TRUE(same_bits(simd.p, scalar.p)) << "n " << n << " step " << step << " decoupled " << decoupled;
        ASSERT_TRUE(same_bits(simd.m, scalar.m)) << "n " << n;
        ASSERT_TRUE(same_bits(simd.v, scalar.v)) << "n " << n;
        ASSERT_EQ(simd.bf16, scalar.bf16) << "n " << n;
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
  o::adamw_update_scalar(s, scalar.p.data(), scalar.m.data(), scalar.v.data(), scalar.g.data(), scalar.bf16.data(), 40);
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
    for (size_t s : starts) EXPECT_EQ(s % 16, 0u);
  }
}

}  // namespace
