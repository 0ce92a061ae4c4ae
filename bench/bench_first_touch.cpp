// First touch of fresh memory (#52; a benchmark, not a test): seconds to write one byte of
// every page of N GiB of new anonymous memory on T threads, each its own contiguous part — what
// a start-up phase costs at least when it makes that much new resident memory (the kernel
// allocates and zeroes each page at its first write; under a hypervisor the host may also have
// to back it, which on this project's VMs made it 5-10x slower the first time memory was used
// after a while). bench_startup.sh sets the start-up phases beside it. Measured two ways in
// the same run: a write per page (a fault each), and the pages populated first in one call per
// thread (base::populate_for_write, MADV_POPULATE_WRITE) — what the weights' reading and the
// host buffers do — with the ratio.
//
//   bench_first_touch [--gib N] [--threads T] [--rounds R]
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/fresh_memory.hpp"
#include "bench_common.hpp"

int main(int argc, char** argv) {
  CLI::App app{"first touch of fresh anonymous memory"};
  double gib = 2;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  int rounds = 1;
  app.add_option("--gib", gib, "GiB to touch")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "threads, each touching its own part")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "rounds, each with fresh memory (the median is printed)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t bytes = static_cast<size_t>(gib * (1 << 30)) / page * page;
  const size_t pages = bytes / page;
  // Median seconds to touch `bytes` of fresh memory; `populate`: each thread populates its part
  // in one call before writing (its writes then take no faults).
  auto touch = [&](bool populate) {
    std::vector<double> seconds;
    for (int r = 0; r < rounds; ++r) {
      auto* data = static_cast<char*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      if (data == MAP_FAILED) {
        std::perror("mmap");
        std::exit(1);
      }
      const auto start = std::chrono::steady_clock::now();
      std::vector<std::thread> workers;
      for (unsigned t = 0; t < threads; ++t) {
        workers.emplace_back([=] {
          const size_t first = pages * t / threads, last = pages * (t + 1) / threads;
          if (populate) superoffload::base::populate_for_write(data + first * page, (last - first) * page);
          for (size_t p = first; p < last; ++p) static_cast<volatile char*>(data)[p * page] = 1;
        });
      }
      for (auto& w : workers) w.join();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      ::munmap(data, bytes);
    }
    return bench::median(seconds);
  };
  // Interleaved, so that both see the host in the same state.
  double faulted = 0, populated = 0;
  for (int pass = 0; pass < 2; ++pass) {
    faulted += touch(false) / 2;
    populated += touch(true) / 2;
  }
  std::printf("cpu: %s\nfirst touch of %.2f GiB (%zu-byte pages) on %u thread(s), median of %d, two passes:\n", bench::cpu_model().c_str(),
              gib, page, threads, rounds);
  std::printf("  a fault per page:  %.3f s, %.2f GB/s\n", faulted, static_cast<double>(bytes) / faulted / 1e9);
  std::printf("  populated first:   %.3f s, %.2f GB/s (%.2fx the faulting rate)\n", populated,
              static_cast<double>(bytes) / populated / 1e9, faulted / populated);
  return 0;
}
