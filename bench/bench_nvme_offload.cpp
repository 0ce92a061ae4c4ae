// The NVMe tier of the optimizer state against the same optimizer with the state in memory,
// and its disk traffic against plain O_DIRECT sequential I/O of the same bytes, in one run:
//   memory   every sub-group stepped by the SIMD CPU AdamW with master and moments in RAM;
//   nvme     the same steps through NvmeStateFile as the optimizer drives it (acquire, step,
//            release; the next sub-groups read ahead, the previous ones written behind);
//   plain    one O_DIRECT pass writing, then one reading, the same bytes to a file in the same
//            directory (64 MiB requests, queue depth 1, no fsync, as the tier's own writes):
//            what the disk gives a simple reader and writer.
// Printed: each median time; the NVMe step's achieved traffic (read + written bytes / its time)
// against plain (its read and write times added, the time the swap would need alone; goal:
// the tier reaches ≥ 0.85 of it when the disk is the limit); and the memory step / NVMe step
// ratio (1: the swap hides entirely behind the CPU step). Rounds interleaved, medians.
//
//   build/bin/bench_nvme_offload --dir /local_nvme [--gb 1] [--sub-group 8388608] [--buffers 4]
//                                [--threads T] [--rounds 3]
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/timer.hpp"
#include "bench_common.hpp"
#include "optim/cpu_adamw.hpp"
#include "optim/nvme_state.hpp"
#include "optim/thread_pool.hpp"

namespace optim = superoffload::optim;
using superoffload::base::now_s;

namespace {

struct Aligned {
  void operator()(char* p) const { std::free(p); }
};

std::unique_ptr<char, Aligned> aligned_buffer(size_t bytes) {
  void* p = nullptr;
  if (::posix_memalign(&p, 4096, bytes) != 0) {
    std::perror("posix_memalign");
    std::exit(1);
  }
  std::memset(p, 1, bytes);
  return std::unique_ptr<char, Aligned>(static_cast<char*>(p));
}

// One O_DIRECT pass over `bytes` of `path` in 64 MiB requests; seconds.
double plain_pass(const std::string& path, char* buffer, size_t bytes, bool write) {
  const int fd = ::open(path.c_str(), (write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY) | O_DIRECT, 0600);
  if (fd < 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
  constexpr size_t kRequest = size_t{64} << 20;
  const double start = now_s();
  for (size_t at = 0; at < bytes; at += kRequest) {
    const size_t n = std::min(kRequest, bytes - at);
    const ssize_t done = write ? ::pwrite(fd, buffer, n, static_cast<off_t>(at)) : ::pread(fd, buffer, n, static_cast<off_t>(at));
    if (done != static_cast<ssize_t>(n)) {
      std::perror(write ? "pwrite" : "pread");
      std::exit(1);
    }
  }
  // No fsync: the tier's writes are not synced either (O_DIRECT bypasses the page cache; the
  // file is scratch, the checkpoints are what is kept).
  const double seconds = now_s() - start;
  ::close(fd);
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"NVMe tier of the optimizer state against memory and plain O_DIRECT I/O"};
  std::string dir;
  double gigabytes = 1.0;
  int64_t sub_group = int64_t{8} << 20;
  size_t buffers = 4;
  int rounds = 3;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  size_t threads = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? static_cast<size_t>(CPU_COUNT(&allowed)) : 1;
  app.add_option("--dir", dir, "a directory on the drive under test (O_DIRECT)")->required();
  app.add_option("--gb", gigabytes, "optimizer state (fp32 master + 2 moments) in GB");
  app.add_option("--sub-group", sub_group, "elements per sub-group ([zero] sub_group_size)");
  app.add_option("--buffers", buffers, "[offload] buffer_count");
  app.add_option("--threads", threads, "CPU AdamW threads");
  app.add_option("--rounds", rounds, "interleaved rounds (medians)");
  CLI11_PARSE(app, argc, argv);

  const auto params = static_cast<int64_t>(gigabytes * 1e9 / 12);
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < params; at += sub_group) sizes.push_back(std::min(sub_group, params - at));
  std::vector<uint64_t> regions;
  for (int64_t n : sizes) regions.push_back(static_cast<uint64_t>(n) * 12 + 128);  // master, exp_avg, exp_avg_sq
  optim::ThreadPool pool(threads, {});
  // Gradients stay in memory in both variants; the in-memory state is one buffer per sub-group.
  std::vector<std::vector<float>> grads, memory_state;
  for (int64_t n : sizes) {
    grads.emplace_back(static_cast<size_t>(n), 1e-3f);
    memory_state.emplace_back(static_cast<size_t>(3 * n), 0.5f);
  }
  const optim::AdamWStep base{.lr = 1e-4f, .weight_decay = 0.01f};
  auto step = [&](float* p, float* m, float* v, const float* g, int64_t n, int64_t count) {
    optim::AdamWStep s = base;
    s.step = count;
    pool.parallel_for(static_cast<size_t>(n), 64, [&](size_t b, size_t e) {
      optim::adamw_update(s, p + b, m + b, v + b, g + b, nullptr, e - b);
    });
  };

  optim::NvmeStateFile file(dir, 0, regions, buffers);
  // Initial state into the file.
  for (size_t k = 0; k < sizes.size(); ++k) {
    char* b = file.acquire(k, /*load=*/false);
    std::memset(b, 0, regions[k]);
    file.release(k, true);
  }
  file.flush();

  uint64_t total = 0;
  for (uint64_t r : regions) total += (r + 4095) / 4096 * 4096;
  auto plain_buffer = aligned_buffer(size_t{64} << 20);
  const std::string plain_path = dir + "/bench_nvme_plain.bin";

  std::vector<double> memory_s, nvme_s, plain_write_s, plain_read_s, traffic_gb;
  for (int r = 0; r < rounds; ++r) {
    double start = now_s();
    for (size_t k = 0; k < sizes.size(); ++k) {
      float* s = memory_state[k].data();
      step(s, s + sizes[k], s + 2 * sizes[k], grads[k].data(), sizes[k], r + 1);
    }
    memory_s.push_back(now_s() - start);

    const auto before = file.stats();
    start = now_s();
    for (size_t k = 0; k < sizes.size(); ++k) {
      for (size_t ahead = 1; ahead < buffers && k + ahead < sizes.size(); ++ahead) file.prefetch(k + ahead);
      auto* p = reinterpret_cast<float*>(file.acquire(k));
      step(p, p + sizes[k], p + 2 * sizes[k], grads[k].data(), sizes[k], r + 1);
      file.release(k, true);
    }
    file.flush();
    nvme_s.push_back(now_s() - start);
    const auto after = file.stats();
    traffic_gb.push_back(static_cast<double>(after.bytes_read - before.bytes_read + after.bytes_written - before.bytes_written) / 1e9);

    plain_write_s.push_back(plain_pass(plain_path, plain_buffer.get(), total, true));
    plain_read_s.push_back(plain_pass(plain_path, plain_buffer.get(), total, false));
  }
  std::filesystem::remove(plain_path);

  const double memory = bench::median(memory_s), nvme = bench::median(nvme_s);
  const double write = bench::median(plain_write_s), read = bench::median(plain_read_s);
  const double gb = static_cast<double>(total) / 1e9, traffic = bench::median(traffic_gb);
  std::printf("cpu: %s; AdamW SIMD target %s, %zu thread(s)\n", bench::cpu_model().c_str(),
              optim::adamw_target().c_str(), pool.size());
  std::printf("state: %.2f GB in %zu sub-groups of up to %lld elements, %zu buffers, in %s; %d rounds, medians\n", gb,
              sizes.size(), static_cast<long long>(sub_group), buffers, dir.c_str(), rounds);
  std::printf("memory step   %.3f s\n", memory);
  std::printf("nvme step     %.3f s: %.2f GB moved, %.2f GB/s\n", nvme, traffic, traffic / nvme);
  std::printf("plain O_DIRECT: write %.2f GB/s (%.3f s), read %.2f GB/s (%.3f s); together %.3f s\n", gb / write, write,
              gb / read, read, write + read);
  std::printf("summary: swap_efficiency=%.2f (plain read+write time / nvme step time) hidden=%.2f (memory step / nvme "
              "step)\n",
              (write + read) / nvme, memory / nvme);
  return 0;
}
