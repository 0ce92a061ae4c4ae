// A fixed pool of worker threads, each pinned to one CPU of the rank's binding, for the CPU
// optimizer: parallel_for splits a range into one contiguous block per thread (the caller's
// thread takes the first block), so every element is touched by the same core every step
// and first-touch keeps memory on that core's NUMA node.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace superoffload::optim {

class ThreadPool {
 public:
  // One thread per CPU in `cpus` (the first is the calling thread's); empty `cpus` means
  // `threads` unpinned threads.
  ThreadPool(size_t threads, const std::vector<int>& cpus);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }
  size_t block_size(size_t n, size_t align) const;
  // The kernel thread ids of the workers (not the caller's thread), once each has started:
  // what resctrl moves into the optimizer's group.
  std::vector<pid_t> thread_ids();
  // Calls fn(begin, end) on disjoint blocks covering [0, n), block starts aligned to `align`:
  // block i (of thread i) begins at i * block_size(n, align).
  void parallel_for(size_t n, size_t align, const std::function<void(size_t, size_t)>& fn);

 private:
  void worker(size_t index);
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t, size_t)>* task_ = nullptr;
  std::vector<std::pair<size_t, size_t>> blocks_;
  size_t generation_ = 0, pending_ = 0;
  std::vector<pid_t> tids_;  // filled by each worker as it starts (0 until then)
  std::condition_variable started_;
  bool stop_ = false;
};

}  // namespace superoffload::optim
