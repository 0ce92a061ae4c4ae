// How much a memory-bandwidth hog on the other cores slows the CPU AdamW (not a test; #37). On a
// GH200 the GPU's traffic over NVLink-C2C (parameter prefetch, gradient offload) goes through the
// same Grace caches and memory controllers as the optimizer; here threads that stream through
// memory on the CPUs the optimizer does not use stand in for it. The slowdown is what cache and
// bandwidth partitioning (resctrl: Intel RDT, AMD PQoS, Arm MPAM) could at best win back on this
// CPU. Rounds interleave the two conditions (alone, beside the hog), so a slow phase of a shared
// machine hits both; the ratio is the median over rounds of the ratio within a round. Where
// resctrl can partition (root, or a prolog's groups), more rounds follow with the optimizer's
// threads in one group and the hog's in the other (the split of [runtime] resctrl_optimizer_*):
// the partitioned rows, against the unpartitioned "alone" time.
//
//   build/bin/bench_adamw_interference [--params 5e7] [--threads T] [--hog-threads H] [--rounds 9]
//       [--resctrl-cache 0.25] [--resctrl-bandwidth 1.0] [--resctrl-mounts FILE]
// Defaults: the optimizer on the first half of this process's CPUs (at least one), the hog on
// the rest (at least one). The last line is `summary: slowdown=… alone_ns_per_param=… …`.
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "bench_common.hpp"
#include "optim/cpu_adamw.hpp"
#include "optim/thread_pool.hpp"
#include "resctrl/decision.hpp"
#include "resctrl/partition.hpp"
#include "resctrl/resctrl.hpp"

namespace o = superoffload::optim;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Threads that stream through a buffer of their own (read, scale, write: a triad's traffic)
// while `running`, and wait otherwise; each counts the bytes it moved.
class BandwidthHog {
 public:
  BandwidthHog(const std::vector<int>& cpus, size_t bytes_per_thread) {
    for (int cpu : cpus) {
      threads_.emplace_back([this, cpu, floats = bytes_per_thread / 8] {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof set, &set);
        std::vector<float> a(floats, 1.0f), b(floats, 0.0f);  // touched here: this CPU's node
        for (;;) {
          {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return running_ || stop_; });
            if (stop_) return;
          }
          while (running_.load(std::memory_order_relaxed)) {
            for (size_t i = 0; i < floats; ++i) b[i] = a[i] * 1.0001f;
            std::swap(a, b);
            bytes_ += 2 * floats * sizeof(float);
          }
        }
      });
    }
  }
  ~BandwidthHog() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      running_ = false;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void run(bool on) {
    {
      std::lock_guard lock(mutex_);
      running_ = on;
    }
    wake_.notify_all();
    if (on) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // streaming before timing starts
  }
  double bytes() const { return static_cast<double>(bytes_.load()); }

 private:
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<bool> running_{false};
  bool stop_ = false;
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace

int main(int argc, char** argv) {
  double params_arg = 5e7;
  int threads = 0, hog_threads = 0, rounds = 9;
  CLI::App app{"CPU AdamW beside a memory-bandwidth hog on the other cores: the slowdown that cache and bandwidth "
               "partitioning could win back."};
  app.add_option("--params", params_arg, "parameters (default 5e7; 30 bytes each: fp32 state, bf16 copy)")
      ->check(CLI::Range(1e3, 1e11));
  app.add_option("--threads", threads, "optimizer threads (default: half of this process's CPUs)")->check(CLI::Range(1, 4096));
  app.add_option("--hog-threads", hog_threads, "hog threads, on the CPUs after the optimizer's (default: the rest)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--rounds", rounds, "rounds, each timing both conditions (default 9)")->check(CLI::Range(1, 1000));
  superoffload::resctrl::Split split;
  std::string mounts = "/proc/self/mounts";
  app.add_option("--resctrl-cache", split.optimizer_cache, "the optimizer's share of the cache ways when partitioned");
  app.add_option("--resctrl-bandwidth", split.optimizer_bandwidth, "the optimizer's bandwidth cap when partitioned");
  app.add_option("--resctrl-mounts", mounts, "the mount table to find resctrl in (a fake tree: the code path only)");
  CLI11_PARSE(app, argc, argv);

  std::vector<int> cpus;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &mask)) cpus.push_back(c);
    }
  }
  const int available = static_cast<int>(cpus.size());
  if (threads == 0) threads = std::max(1, available / 2);
  if (hog_threads == 0) hog_threads = std::max(1, available - threads);
  std::vector<int> optimizer_cpus, hog_cpus;
  for (int i = 0; i < threads; ++i) optimizer_cpus.push_back(cpus[static_cast<size_t>(i % available)]);
  for (int i = 0; i < hog_threads; ++i) hog_cpus.push_back(cpus[static_cast<size_t>((threads + i) % available)]);

  const auto n = static_cast<size_t>(params_arg);
  std::printf("bench_adamw_interference: %s, kernel target %s\n", bench::cpu_model().c_str(), o::adamw_target().c_str());
  std::printf("  %zu parameters (fp32 state + bf16 copy, 30 B each), optimizer on %d thread(s), hog on %d thread(s)%s\n",
              n, threads, hog_threads, threads + hog_threads > available ? " (sharing CPUs: more threads than CPUs)" : "");
  const auto tree = superoffload::resctrl::detect(mounts);
  std::printf("  %s\n", superoffload::resctrl::describe(tree).c_str());

  o::ThreadPool pool(static_cast<size_t>(threads), optimizer_cpus);
  std::vector<float> p(n), m(n), v(n), g(n);
  std::vector<uint16_t> out(n);
  pool.parallel_for(n, 64, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      p[i] = 0.01f * static_cast<float>(i % 997);
      g[i] = 1e-3f * static_cast<float>(static_cast<int64_t>(i % 101) - 50);
      m[i] = v[i] = 0;
      out[i] = 0;
    }
  });
  int64_t step = 0;
  auto adamw = [&] {
    const o::AdamWStep s{1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, true, ++step};
    const double start = now_s();
    pool.parallel_for(n, 64, [&](size_t b, size_t e) {
      o::adamw_pass(o::AdamWPass::step, s, p.data() + b, m.data() + b, v.data() + b, g.data() + b, out.data() + b, e - b);
    });
    return now_s() - start;
  };
  BandwidthHog hog(hog_cpus, size_t{256} << 20);  // 256 MiB per hog thread: far beyond any cache
  adamw();  // warm-up
  std::vector<double> alone, beside, ratio;
  double hog_bytes = 0, hog_seconds = 0;
  for (int r = 0; r < rounds; ++r) {
    alone.push_back(adamw());
    hog.run(true);
    const double bytes_before = hog.bytes(), start = now_s();
    beside.push_back(adamw());
    hog_seconds += now_s() - start;
    hog_bytes += hog.bytes() - bytes_before;
    hog.run(false);
    ratio.push_back(beside.back() / alone.back());
  }
  const double per_param = 1e9 / static_cast<double>(n);
  const double alone_ns = bench::median(alone) * per_param, beside_ns = bench::median(beside) * per_param;
  std::printf("  %-34s %10s %10s %12s\n", "condition", "median ms", "ns/param", "GB/s (30 B)");
  std::printf("  %-34s %10.1f %10.3f %12.1f\n", "AdamW alone", bench::median(alone) * 1e3, alone_ns, 30 / alone_ns);
  std::printf("  %-34s %10.1f %10.3f %12.1f\n", "AdamW beside the hog", bench::median(beside) * 1e3, beside_ns,
              30 / beside_ns);
  std::printf("  the hog moved %.1f GB/s while the optimizer ran\n", hog_seconds > 0 ? hog_bytes / hog_seconds / 1e9 : 0.0);

  // The same beside the hog, with the optimizer's threads (the pool's and this one, which runs
  // the first block) in one resctrl group and the hog's in the other.
  namespace rc = superoffload::resctrl;
  const char* job = std::getenv("SLURM_JOB_ID");
  const auto decision = rc::decide(tree, rc::Mode::automatic, split, job ? job : "", 1, {}, true);
  double partitioned_ratio = 0;
  if (!decision.partitions()) {
    std::printf("  partitioned rows: none, resctrl %s\n", rc::describe(decision).c_str());
  } else {
    try {
      auto partition = decision.action == rc::Action::adopt
                           ? rc::Partition::adopt(tree.mount, decision.optimizer_dir, decision.rest_dir)
                           : rc::Partition::create(tree.mount, rc::group_prefix("bench", ::getpid()),
                                                   rc::GroupKind::control, decision.schemata);
      auto optimizer_threads = pool.thread_ids();
      optimizer_threads.push_back(::gettid());
      partition.assign(optimizer_threads);
      std::printf("  partitioned: resctrl %s\n", rc::describe(decision).c_str());
      std::vector<double> alone_p, beside_p;
      for (int r = 0; r < rounds; ++r) {
        alone_p.push_back(adamw());
        hog.run(true);
        beside_p.push_back(adamw());
        hog.run(false);
      }
      const double alone_p_ns = bench::median(alone_p) * per_param, beside_p_ns = bench::median(beside_p) * per_param;
      std::printf("  %-34s %10.1f %10.3f %12.1f\n", "AdamW alone, partitioned", bench::median(alone_p) * 1e3,
                  alone_p_ns, 30 / alone_p_ns);
      std::printf("  %-34s %10.1f %10.3f %12.1f\n", "AdamW beside the hog, partitioned", bench::median(beside_p) * 1e3,
                  beside_p_ns, 30 / beside_p_ns);
      partitioned_ratio = beside_p_ns / alone_ns;
    } catch (const std::exception& e) {
      std::printf("  partitioned rows: none, %s\n", e.what());
    }
  }
  std::printf("summary: slowdown=%.3f alone_ns_per_param=%.3f beside_ns_per_param=%.3f threads=%d hog_threads=%d "
              "partitioned_slowdown=%s\n",
              bench::median(ratio), alone_ns, beside_ns, threads, hog_threads,
              partitioned_ratio > 0 ? std::to_string(partitioned_ratio).c_str() : "none");
  return 0;
}
