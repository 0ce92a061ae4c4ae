// ActivationOffload.
#include "zero/activation_offload.hpp"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cstring>
#include <utility>

#include "base/error.hpp"
#include "base/timer.hpp"

namespace superoffload::zero {

ActivationOffload::ActivationOffload(at::Device device, bool pin, std::chrono::milliseconds copy_delay)
    : device_(device),
      // Sizes are known only as layers store: no RLIMIT_MEMLOCK check up front; a buffer that
      // cannot be pinned falls back to plain memory, with a warning.
      memory_(pin && !device.is_cpu(), 0, "activation checkpoints in host memory", "[offload] pin_memory"),
      copy_delay_(copy_delay) {
  if (device_.is_cpu()) {
    worker_ = std::thread([this] { worker_loop(); });
  } else {
    const c10::impl::VirtualGuardImpl guard(device_.type());
    copy_stream_ = guard.getStreamFromGlobalPool(device_);
  }
}

ActivationOffload::~ActivationOffload() {
  if (worker_.joinable()) {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }
  // Copies in flight read or write the host buffers freed with this object.
  if (copy_stream_) copy_stream_->synchronize();
}

ActivationOffload::Slot& ActivationOffload::slot(size_t layer) {
  if (layer >= slots_.size()) slots_.resize(layer + 1);
  return slots_[layer];
}

void ActivationOffload::worker_loop() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to copy
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    if (copy_delay_.count() > 0) std::this_thread::sleep_for(copy_delay_);
    task();  // an exception is kept in the task's future and thrown by take()
  }
}

std::shared_future<void> ActivationOffload::on_worker(std::function<void()> copy) {
  std::packaged_task<void()> task(std::move(copy));
  auto done = task.get_future().share();
  {
    const std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
  return done;
}

void ActivationOffload::store(size_t layer, const at::Tensor& input) {
  auto& s = slot(layer);
  // Left over from a micro-batch that ended early (an exception): finish its copies, drop it.
  if (s.stored) take(layer);
  const auto source = input.detach().contiguous();
  const int64_t numel = source.numel();
  if (!s.host.defined() || s.host.numel() < numel || s.host.scalar_type() != source.scalar_type()) {
    // A copy in flight may still read the buffer being replaced (a GPU's fetch of the last
    // micro-batch): let it finish first. Rare: buffers are reused while shapes repeat.
    if (copy_stream_) copy_stream_->synchronize();
    if (s.host.defined()) host_bytes_ -= s.host.numel() * static_cast<int64_t>(s.host.element_size());
    s.host = memory_.empty({numel}, source.scalar_type());
    host_bytes_ += numel * static_cast<int64_t>(s.host.element_size());
  }
  s.sizes = source.sizes().vec();
  s.dtype = source.scalar_type();
  s.stored = true;
  s.fetched = at::Tensor();
  bytes_stored_ += numel * static_cast<int64_t>(source.element_size());
  const auto host = s.host.narrow(0, 0, numel);
  if (copy_stream_) {
    // The copy stream waits for the compute stream that wrote the input, copies, and the
    // allocator keeps the input's memory until the copy stream is past it.
    const c10::impl::VirtualGuardImpl guard(device_.type());
    c10::Event written(device_.type());
    written.record(guard.getStream(device_));
    written.block(*copy_stream_);
    {
      const c10::StreamGuard on_copy(*copy_stream_);
      host.copy_(source.view({-1}), /*non_blocking=*/true);
    }
    source.record_stream(*copy_stream_);
    return;
  }
  const size_t bytes = static_cast<size_t>(numel) * source.element_size();
  // The source is dropped once copied, as the GPU's allocator reuses it once the copy stream is
  // past it: the task (and this lambda with it) lives until take() in the future's shared state.
  s.cpu_stored = on_worker([source = at::Tensor(source), host, bytes]() mutable {
    std::memcpy(host.data_ptr(), source.const_data_ptr(), bytes);
    source = at::Tensor();
  });
}

void ActivationOffload::prefetch(size_t layer) {
  auto& s = slot(layer);
  SO_CHECK(s.stored, "activation offload: layer " << layer << "'s input fetched before it was stored");
  if (s.fetched.defined()) return;
  // Allocated by (and for) the compute stream, which takes it once the copy is done.
  s.fetched = at::empty(s.sizes, at::TensorOptions().dtype(s.dtype).device(device_));
  const int64_t numel = s.fetched.numel();
  const auto host = s.host.narrow(0, 0, numel);
  if (copy_stream_) {
    // The memory may have been freed by compute-stream work still queued: the copy waits for it.
    const c10::impl::VirtualGuardImpl guard(device_.type());
    c10::Event allocated(device_.type());
    allocated.record(guard.getStream(device_));
    allocated.block(*copy_stream_);
    {
      const c10::StreamGuard on_copy(*copy_stream_);
      s.fetched.view({-1}).copy_(host, /*non_blocking=*/true);
    }
    s.copied_back.emplace(device_.type());
    s.copied_back->record(*copy_stream_);
    return;
  }
  const auto target = s.fetched;
  const size_t bytes = static_cast<size_t>(numel) * target.element_size();
  // The worker runs copies in order: this one starts after the store has written `host`.
  s.cpu_fetched = on_worker([target, host, bytes] { std::memcpy(target.data_ptr(), host.const_data_ptr(), bytes); });
}

at::Tensor ActivationOffload::take(size_t layer) {
  prefetch(layer);
  auto& s = slot(layer);
  if (copy_stream_) {
    const c10::impl::VirtualGuardImpl guard(device_.type());
    s.copied_back->block(guard.getStream(device_));
    s.copied_back.reset();
  } else {
    const double start = base::now_s();
    s.cpu_stored.get();
    s.cpu_fetched.get();
    wait_s_ += base::now_s() - start;
    s.cpu_stored = {};
    s.cpu_fetched = {};
  }
  s.stored = false;
  return std::exchange(s.fetched, at::Tensor());
}

}  // namespace superoffload::zero
