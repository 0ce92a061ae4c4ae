// ThreadPool.
#include "optim/thread_pool.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <string>

namespace superoffload::optim {
namespace {

void pin_current_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort: a refused pin only costs locality
}

}  // namespace

ThreadPool::ThreadPool(size_t threads, const std::vector<int>& cpus) {
  const size_t count = cpus.empty() ? std::max<size_t>(1, threads) : cpus.size();
  blocks_.resize(count);
  tids_.assign(count - 1, 0);
  for (size_t i = 1; i < count; ++i) {
    workers_.emplace_back([this, i, cpu = cpus.empty() ? -1 : cpus[i]] {
      if (cpu >= 0) pin_current_thread(cpu);
      // Named for top -H, perf and the resctrl tests: "so-adamw-1", ...
      pthread_setname_np(pthread_self(), ("so-adamw-" + std::to_string(i)).substr(0, 15).c_str());
      {
        std::lock_guard lock(mutex_);
        tids_[i - 1] = ::gettid();
      }
      started_.notify_all();
      worker(i);
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    ++generation_;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

std::vector<pid_t> ThreadPool::thread_ids() {
  std::unique_lock lock(mutex_);
  started_.wait(lock, [&] { return std::find(tids_.begin(), tids_.end(), 0) == tids_.end(); });
  return tids_;
}

void ThreadPool::worker(size_t index) {
  size_t seen = 0;
  for (;;) {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return generation_ != seen; });
    seen = generation_;
    if (stop_) return;
    const auto* task = task_;
    const auto block = blocks_[index];
    lock.unlock();
    if (block.first < block.second) (*task)(block.first, block.second);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

size_t ThreadPool::block_size(size_t n, size_t align) const {
  align = std::max<size_t>(1, align);
  return std::max(align, ((n + size() - 1) / size() + align - 1) / align * align);
}

void ThreadPool::parallel_for(size_t n, size_t align, const std::function<void(size_t, size_t)>& fn) {
  const size_t count = size();
  const size_t per = block_size(n, align);
  for (size_t i = 0; i < count; ++i) blocks_[i] = {std::min(n, i * per), std::min(n, (i + 1) * per)};
  {
    std::lock_guard lock(mutex_);
    task_ = &fn;
    pending_ = workers_.size();
    ++generation_;
  }
  wake_.notify_all();
  if (blocks_[0].first < blocks_[0].second) fn(blocks_[0].first, blocks_[0].second);
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
}

}  // namespace superoffload::optim
