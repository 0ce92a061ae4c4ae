// CPU AdamW benchmark (not a test): ns/param and GB/s of superoffload's SIMD kernel beside
// torch::optim::AdamW, LibTorch's fused CPU AdamW (at::_fused_adamw_) and a streaming
// memory-bandwidth bound, all on the same data in the same run: the bound is a fused
// read-modify-write loop over the same bytes (read p, m, v, g; write p, m, v and the bf16
// copy: 30 bytes per parameter). Threads are pinned to the first CPUs of this process.
//
//   build/bin/bench_cpu_adamw [--params N] [--threads T] [--reps R]
// Last line: summary: params=<N> threads=<T> ns_per_param=<x> vs_torch=<x> vs_fused=<x> fraction_of_bound=<x>
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench_cpu_adamw.cpp"
#include <hwy/foreach_target.h>  // NOLINT
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
// The bandwidth bound: the kernel's memory traffic with trivial arithmetic.
void Stream(float* HWY_RESTRICT p, float* HWY_RESTRICT m, float* HWY_RESTRICT v, const float* HWY_RESTRICT g,
            uint16_t* HWY_RESTRICT out, size_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const hn::RebindToSigned<decltype(df)> di32;
  const size_t lanes = hn::Lanes(df);
  for (size_t i = 0; i + lanes <= n; i += lanes) {
    const auto gi = hn::LoadU(df, g + i);
    const auto pi = hn::Add(hn::LoadU(df, p + i), gi);
    hn::StoreU(pi, df, p + i);
    hn::StoreU(hn::Add(hn::LoadU(df, m + i), gi), df, m + i);
    hn::StoreU(hn::Add(hn::LoadU(df, v + i), gi), df, v + i);
    hn::StoreU(hn::DemoteTo(du16, hn::ShiftRight<16>(hn::BitCast(di32, pi))), du16, out + i);
  }
}
}  // namespace bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sched.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "base/timer.hpp"
#include "optim/cpu_adamw.hpp"
#include "optim/thread_pool.hpp"

namespace bench {
HWY_EXPORT(Stream);
}

namespace {

namespace o = superoffload::optim;
using superoffload::base::now_s;

// Best of `reps` runs, in seconds.
double best_of(int reps, const std::function<void()>& run) {
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < reps; ++r) {
    const double start = now_s();
    run();
    best = std::min(best, now_s() - start);
  }
  return best;
}

double available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (meminfo >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024;
    meminfo.ignore(64, '\n');
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t params = 100'000'000;
  int threads = 2, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--params") params = static_cast<int64_t>(std::stod(argv[i + 1]));
    else if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else if (a == "--reps") reps = std::stoi(argv[i + 1]);
  }
  const auto n = static_cast<size_t>(params);
  std::vector<int> cpus;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    for (int c = 0; c < CPU_SETSIZE && static_cast<int>(cpus.size()) < threads; ++c) {
      if (CPU_ISSET(c, &mask)) cpus.push_back(c);
    }
  }
  o::ThreadPool pool(static_cast<size_t>(threads), cpus);
  at::set_num_threads(threads);
  std::printf("bench_cpu_adamw: %lld parameters, %d thread(s), kernel target %s, best of %d\n",
              static_cast<long long>(params), threads, o::adamw_target().c_str(), reps);

  // Our data, first touched by the pool's threads (as in training).
  std::vector<float> p(n), m(n), v(n), g(n);
  std::vector<uint16_t> bf16(n);
  pool.parallel_for(n, 64, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      p[i] = 0.01f * static_cast<float>(i % 997);
      g[i] = 1e-3f * static_cast<float>(static_cast<int64_t>(i % 101) - 50);
      m[i] = 0;
      v[i] = 0;
    }
  });
  const double bytes = 30.0 * static_cast<double>(n);
  int64_t step = 0;
  const double ours = best_of(reps, [&] {
    const o::AdamWStep s{1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, true, ++step};
    pool.parallel_for(n, 64, [&](size_t b, size_t e) {
      o::adamw_update(s, p.data() + b, m.data() + b, v.data() + b, g.data() + b, bf16.data() + b, e - b);
    });
  });
  const double bound = best_of(reps, [&] {
    pool.parallel_for(n, 64, [&](size_t b, size_t e) {
      HWY_DYNAMIC_DISPATCH(bench::Stream)(p.data() + b, m.data() + b, v.data() + b, g.data() + b, bf16.data() + b, e - b);
    });
  });

  // LibTorch baselines need their own parameter, gradient and two moments: 16 more bytes per
  // parameter (plus temporaries for torch::optim::AdamW).
  double torch_s = NAN, fused_s = NAN;
  if (available_bytes() > 40.0 * static_cast<double>(n)) {
    auto param = at::rand({params}).set_requires_grad(true);
    param.mutable_grad() = at::rand({params}) * 1e-3;
    torch::optim::AdamW optimizer({param}, torch::optim::AdamWOptions(1e-4).weight_decay(0.01));
    torch_s = best_of(reps, [&] { optimizer.step(); });
    optimizer = torch::optim::AdamW({param}, torch::optim::AdamWOptions(1e-4));  // frees its state
    auto fp = at::rand({params}), fg = at::rand({params}) * 1e-3, fm = at::zeros({params}), fv = at::zeros({params});
    auto fstep = at::zeros({}, at::kFloat);
    fused_s = best_of(reps, [&] {
      fstep.add_(1);
      at::_fused_adamw_({fp}, {fg}, {fm}, {fv}, {}, {fstep}, 1e-4, 0.9, 0.999, 0.01, 1e-8, false, false);
    });
  } else {
    std::printf("LibTorch baselines skipped: not enough free memory for a second copy of the state\n");
  }

  auto row = [&](const char* name, double seconds, double traffic) {
    std::printf("  %-28s %8.3f ns/param  %7.2f GB/s\n", name, seconds / params * 1e9, traffic / seconds / 1e9);
  };
  row("superoffload SIMD AdamW", ours, bytes);
  row("bandwidth bound (stream)", bound, bytes);
  if (!std::isnan(torch_s)) {
    row("torch::optim::AdamW", torch_s, bytes);
    row("at::_fused_adamw_ (fp32 only)", fused_s, 28.0 * static_cast<double>(n));
  }
  std::printf("summary: params=%lld threads=%d ns_per_param=%.3f vs_torch=%.2f vs_fused=%.2f fraction_of_bound=%.2f\n",
              static_cast<long long>(params), threads, ours / params * 1e9, torch_s / ours, fused_s / ours, bound / ours);
  return 0;
}
#endif
