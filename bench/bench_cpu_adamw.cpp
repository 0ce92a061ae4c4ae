// CPU AdamW benchmark (not a test). Compares like with like, in the same run, on the same
// machine, in three groups:
//   fp32 state           superoffload's kernel (no bf16 copy) against torch::optim::AdamW,
//                        LibTorch's fused CPU AdamW (at::_fused_adamw_) and a streaming bound
//                        over the same 28 bytes per parameter (read p, m, v, g; write p, m, v)
//   + bf16 copy          the kernel that also writes the bf16 weights the GPU uses (30 B)
//                        against what a LibTorch user writes: fused AdamW, then a bf16 copy
//                        (two passes), and a streaming bound over the kernel's 30 bytes
//   bf16 moments         [offload] optimizer_state_dtype = "bf16", with the bf16 copy (22 B)
//                        against its streaming bound
//   redo, undo           SuperOffload's step-end passes over speculated sub-groups: redo
//                        (the speculated step replaced by the clipped one, + bf16 copy, 30 B)
//                        and undo (a skipped step, 28 B), against the step and the bounds
// The bound is a read-modify-write loop over exactly the kernel's bytes with trivial
// arithmetic. Every row runs once per round, rounds interleaved, so that a slow phase of a
// shared machine hits all rows alike. The table shows each row's best and median round; the
// summary lines use medians: ns_per_param is the median round, and each ratio is the median
// over rounds of the ratio within a round (robust on shared machines, where the best round
// is luck and memory bandwidth drifts by tens of percent). Buffers come from LibTorch's allocator (64-byte aligned,
// as the optimizer's host buffers are) and are first touched by the pinned pool threads.
//
//   build/bin/bench_cpu_adamw [--params 1e8] [--threads T] [--rounds 9] [--target AVX2]
// --target holds the kernels (and the bound's loop) to a narrower SIMD target than the CPU's best,
// e.g. AVX2 on an AVX-512 machine: what the AVX2 code does against memory, though not an AMD
// CPU's memory system.
// The last four lines are `summary: kernel=… ns_per_param=… … fraction_of_bound=…`.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench_cpu_adamw.cpp"
#include <hwy/foreach_target.h>  // NOLINT
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
// The bound of a kernel: its memory traffic with trivial arithmetic. Moment is float (fp32
// state, 28 B + the optional 2 B copy) or uint16_t (bf16 moments, 20 B + 2 B).
template <typename Moment>
void StreamImpl(float* HWY_RESTRICT p, Moment* HWY_RESTRICT m, Moment* HWY_RESTRICT v, const float* HWY_RESTRICT g,
                uint16_t* HWY_RESTRICT out, size_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const hn::RebindToSigned<decltype(df)> di32;  // values below 2^16: the saturating demotion is exact
  const size_t lanes = hn::Lanes(df);
  auto upper_half = [&](auto x) { return hn::DemoteTo(du16, hn::ShiftRight<16>(hn::BitCast(di32, x))); };
  for (size_t i = 0; i + lanes <= n; i += lanes) {
    const auto gi = hn::LoadU(df, g + i);
    const auto pi = hn::Add(hn::LoadU(df, p + i), gi);
    hn::StoreU(pi, df, p + i);
    if constexpr (sizeof(Moment) == sizeof(float)) {
      hn::StoreU(hn::Add(hn::LoadU(df, m + i), gi), df, m + i);
      hn::StoreU(hn::Add(hn::LoadU(df, v + i), gi), df, v + i);
    } else {
      const auto gbits = upper_half(gi);
      hn::StoreU(hn::Add(hn::LoadU(du16, m + i), gbits), du16, m + i);
      hn::StoreU(hn::Add(hn::LoadU(du16, v + i), gbits), du16, v + i);
    }
    if (out) hn::StoreU(upper_half(pi), du16, out + i);
  }
}
void StreamFp32(float* p, float* m, float* v, const float* g, uint16_t* out, size_t n) { StreamImpl(p, m, v, g, out, n); }
void StreamBf16Moments(float* p, uint16_t* m, uint16_t* v, const float* g, uint16_t* out, size_t n) {
  StreamImpl(p, m, v, g, out, n);
}
}  // namespace bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sched.h>
#include <torch/optim/adamw.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/timer.hpp"
#include "bench_common.hpp"
#include "optim/cpu_adamw.hpp"
#include "optim/thread_pool.hpp"

namespace bench {
HWY_EXPORT(StreamFp32);
HWY_EXPORT(StreamBf16Moments);
}

namespace {

namespace o = superoffload::optim;
using superoffload::base::now_s;

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

struct Row {
  std::string name;
  double bytes_per_param;  // what the row moves (its bound counts the same bytes)
  std::function<void()> run;
  std::vector<double> seconds;
  double best() const { return *std::min_element(seconds.begin(), seconds.end()); }
  double median() const { return bench::median(seconds); }
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line: it is often piped or cut off by a timeout
  double params_arg = 1e8;
  int threads = 0, rounds = 9;
  CLI::App app{"CPU AdamW benchmark: superoffload's SIMD kernel against LibTorch's AdamW implementations and a "
               "memory-bandwidth bound, same data, same run."};
  app.add_option("--params", params_arg, "parameters per buffer (default 1e8; each buffer must exceed the caches)")
      ->check(CLI::Range(1e3, 1e11));
  app.add_option("--threads", threads, "threads, pinned to the first CPUs this process may use (default: all of them)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--rounds", rounds, "rounds; every row runs once per round (default 9)")->check(CLI::Range(1, 1000));
  std::string target;
  app.add_option("--target", target, "SIMD target to hold the kernels to, e.g. AVX2 (default: the CPU's best)");
  CLI11_PARSE(app, argc, argv);
  if (!target.empty()) {
    // Highway's better targets have lower bits: disabling every bit below the one named leaves
    // it the best the dispatcher may take.
    int64_t bit = 0;
    for (int64_t b = 1; b != 0 && b <= static_cast<int64_t>(HWY_TARGETS); b <<= 1) {
      if ((b & static_cast<int64_t>(HWY_TARGETS)) && target == hwy::TargetName(b)) bit = b;
    }
    if (bit == 0 || !(bit & static_cast<int64_t>(hwy::SupportedTargets()))) {
      std::fprintf(stderr, "bench_cpu_adamw: --target %s is not a target compiled in and supported by this CPU\n", target.c_str());
      return 2;
    }
    hwy::DisableTargets(bit - 1);
  }

  const auto params = static_cast<int64_t>(params_arg);
  const auto n = static_cast<size_t>(params);
  std::vector<int> cpus;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &mask)) cpus.push_back(c);
    }
  }
  if (threads == 0) threads = std::max<int>(1, static_cast<int>(cpus.size()));
  if (static_cast<int>(cpus.size()) > threads) cpus.resize(static_cast<size_t>(threads));
  o::ThreadPool pool(static_cast<size_t>(threads), cpus);
  at::set_num_threads(threads);
  std::printf("bench_cpu_adamw: %s, kernel target %s\n", bench::cpu_model().c_str(), o::adamw_target().c_str());
  std::printf("  %lld parameters, %d thread(s) pinned to CPUs", static_cast<long long>(params), threads);
  for (int c : cpus) std::printf(" %d", c);
  std::printf(", %d interleaved rounds\n", rounds);

  // Kernel buffers: fp32 state, bf16 moments, the bf16 copy; 22 bytes per parameter.
  const double kernel_bytes = 22.0 * static_cast<double>(n);
  if (available_bytes() < kernel_bytes * 1.1) {
    std::fprintf(stderr, "bench_cpu_adamw: %.1f GB needed, %.1f GB available: use a smaller --params\n",
                 kernel_bytes / 1e9, available_bytes() / 1e9);
    return 2;
  }
  auto fp32 = [&] { return at::empty({params}, at::kFloat); };
  auto u16 = [&] { return at::empty({params}, at::kBFloat16); };
  at::Tensor tp = fp32(), tm = fp32(), tv = fp32(), tg = fp32(), tm16 = u16(), tv16 = u16(), tout = u16();
  float *p = tp.data_ptr<float>(), *m = tm.data_ptr<float>(), *v = tv.data_ptr<float>(), *g = tg.data_ptr<float>();
  auto bits = [](at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); };
  uint16_t *m16 = bits(tm16), *v16 = bits(tv16), *out = bits(tout);
  pool.parallel_for(n, 64, [&](size_t b, size_t e) {  // first touch by the threads that use the pages
    for (size_t i = b; i < e; ++i) {
      p[i] = 0.01f * static_cast<float>(i % 997);
      g[i] = 1e-3f * static_cast<float>(static_cast<int64_t>(i % 101) - 50);
      m[i] = v[i] = 0;
      m16[i] = v16[i] = out[i] = 0;
    }
  });
  int64_t step = 0;
  auto kernel = [&](bool copy, o::AdamWPass pass = o::AdamWPass::step) {
    return [&, copy, pass] {
      o::AdamWStep s{1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, true, pass == o::AdamWPass::step ? ++step : step};
      s.grad_scale = pass == o::AdamWPass::redo ? 0.37f : 1.0f;
      pool.parallel_for(n, 64, [&](size_t b, size_t e) {
        o::adamw_pass(pass, s, p + b, m + b, v + b, g + b, copy ? out + b : nullptr, e - b);
      });
    };
  };
  int64_t moment_step = 0;
  auto bf16_moments_kernel = [&] {
    const o::AdamWStep s{1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, true, ++moment_step};
    const uint32_t key = o::moment_rounding_key(0, moment_step);
    pool.parallel_for(n, 64, [&](size_t b, size_t e) {
      o::adamw_pass(o::AdamWPass::step, s, p + b, m16 + b, v16 + b, g + b, out + b, e - b, {key, b});
    });
  };
  auto stream = [&](bool copy) {
    return [&, copy] {
      pool.parallel_for(n, 64, [&](size_t b, size_t e) {
        HWY_DYNAMIC_DISPATCH(bench::StreamFp32)(p + b, m + b, v + b, g + b, copy ? out + b : nullptr, e - b);
      });
    };
  };
  auto stream_bf16_moments = [&] {
    pool.parallel_for(n, 64, [&](size_t b, size_t e) {
      HWY_DYNAMIC_DISPATCH(bench::StreamBf16Moments)(p + b, m16 + b, v16 + b, g + b, out + b, e - b);
    });
  };

  std::vector<Row> rows = {
      {"superoffload AdamW, fp32", 28, kernel(false)},
      {"bound (stream), 28 B", 28, stream(false)},
      {"superoffload AdamW + bf16 copy", 30, kernel(true)},
      {"bound (stream), 30 B", 30, stream(true)},
      {"superoffload bf16 moments + copy", 22, bf16_moments_kernel},
      {"bound (stream), 22 B", 22, stream_bf16_moments},
      {"superoffload redo + bf16 copy", 30, kernel(true, o::AdamWPass::redo)},
      {"superoffload undo", 28, kernel(false, o::AdamWPass::undo)},
  };
  // LibTorch needs its own parameter, gradient, moments and bf16 copy (18 B per parameter),
  // and torch::optim::AdamW temporaries on top.
  at::Tensor fp, fg, fm, fv, fstep, fout, param;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  const bool torch_rows = available_bytes() > 40.0 * static_cast<double>(n);
  if (torch_rows) {
    fp = at::rand({params});
    fg = at::rand({params}) * 1e-3;
    fm = at::zeros({params});
    fv = at::zeros({params});
    fout = at::empty({params}, at::kBFloat16);
    fstep = at::zeros({}, at::kFloat);
    auto fused = [&] {
      fstep.add_(1);
      at::_fused_adamw_({fp}, {fg}, {fm}, {fv}, {}, {fstep}, 1e-4, 0.9, 0.999, 0.01, 1e-8, false, false);
    };
    rows.push_back({"at::_fused_adamw_, fp32", 28, fused});
    rows.push_back({"at::_fused_adamw_ + bf16 copy", 34, [&, fused] {
                      fused();
                      fout.copy_(fp);
                    }});
    param = at::rand({params}).set_requires_grad(true);
    param.mutable_grad() = at::rand({params}) * 1e-3;
    optimizer = std::make_unique<torch::optim::AdamW>(std::vector<at::Tensor>{param},
                                                      torch::optim::AdamWOptions(1e-4).weight_decay(0.01));
    rows.push_back({"torch::optim::AdamW", 28, [&] { optimizer->step(); }});
  } else {
    std::printf("LibTorch rows skipped: not enough free memory for a second copy of the state\n");
  }

  for (auto& row : rows) row.run();  // warm-up: page faults, LibTorch's lazy state
  for (int r = 0; r < rounds; ++r) {
    for (auto& row : rows) {
      const double start = now_s();
      row.run();
      row.seconds.push_back(now_s() - start);
    }
  }

  auto ns = [&](const Row& row) { return row.best() / static_cast<double>(params) * 1e9; };
  std::printf("  %-34s %9s %9s %9s\n", "", "ns/param", "median", "GB/s");
  for (const auto& row : rows) {
    std::printf("  %-34s %9.3f %9.3f %9.2f\n", row.name.c_str(), ns(row),
                row.median() / static_cast<double>(params) * 1e9,
                row.bytes_per_param * static_cast<double>(params) / row.best() / 1e9);
  }
  auto find = [&](const std::string& name) -> const Row* {
    for (const auto& row : rows) {
      if (row.name == name) return &row;
    }
    return nullptr;
  };
  // How many times faster `ours` is than `other`: the median over rounds of the ratio within
  // a round (NaN when `other` was skipped).
  auto ratio = [&](const Row& ours, const char* other) {
    const Row* o = find(other);
    if (!o) return std::nan("");
    std::vector<double> within;
    for (size_t r = 0; r < ours.seconds.size(); ++r) within.push_back(o->seconds[r] / ours.seconds[r]);
    return bench::median(within);
  };
  auto median_ns = [&](const Row& row) { return row.median() / static_cast<double>(params) * 1e9; };
  const Row& f32 = *find("superoffload AdamW, fp32");
  const Row& copy = *find("superoffload AdamW + bf16 copy");
  const Row& moments = *find("superoffload bf16 moments + copy");
  const Row& redo = *find("superoffload redo + bf16 copy");
  std::printf("summary: kernel=fp32 params=%lld threads=%d ns_per_param=%.3f vs_torch=%.2f vs_fused=%.2f "
              "fraction_of_bound=%.2f\n",
              static_cast<long long>(params), threads, median_ns(f32), ratio(f32, "torch::optim::AdamW"),
              ratio(f32, "at::_fused_adamw_, fp32"), ratio(f32, "bound (stream), 28 B"));
  std::printf("summary: kernel=fp32+bf16_copy params=%lld threads=%d ns_per_param=%.3f vs_fused_plus_copy=%.2f "
              "vs_fused=%.2f fraction_of_bound=%.2f\n",
              static_cast<long long>(params), threads, median_ns(copy), ratio(copy, "at::_fused_adamw_ + bf16 copy"),
              ratio(copy, "at::_fused_adamw_, fp32"), ratio(copy, "bound (stream), 30 B"));
  std::printf("summary: kernel=bf16_moments+bf16_copy params=%lld threads=%d ns_per_param=%.3f "
              "vs_fused_plus_copy=%.2f vs_fused=%.2f fraction_of_bound=%.2f\n",
              static_cast<long long>(params), threads, median_ns(moments), ratio(moments, "at::_fused_adamw_ + bf16 copy"),
              ratio(moments, "at::_fused_adamw_, fp32"), ratio(moments, "bound (stream), 22 B"));
  // time_vs_step: how many times the plain step's time (with the same bf16 copy) the redo takes.
  std::printf("summary: kernel=redo+bf16_copy params=%lld threads=%d ns_per_param=%.3f time_vs_step=%.2f "
              "fraction_of_bound=%.2f\n",
              static_cast<long long>(params), threads, median_ns(redo), 1.0 / ratio(redo, "superoffload AdamW + bf16 copy"),
              ratio(redo, "bound (stream), 30 B"));
  return 0;
}
#endif
