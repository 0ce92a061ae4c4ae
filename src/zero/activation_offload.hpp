// Activation checkpoints in host memory ([model] activation_offload = "host"; DeepSpeed's
// activation_checkpointing.cpu_checkpointing). With activation checkpointing a layer's input is
// all that forward keeps of it; at long sequences those inputs are most of the device's memory
// (128k tokens of an 8B model: 1 GiB per layer, 32 GiB in all), while a GH200 has 480 GB of host
// memory behind a 450 GB/s link.
//
// Forward: store(i) starts copying layer i's input to a host buffer on a copy stream, after
// the compute stream has written it; the compute stream goes on, and the device tensor is
// freed once the copy has read it (the allocator is told the copy stream uses it). Backward:
// prefetch(i) brings layer i's input back on the copy stream, one layer ahead of its recompute;
// take(i) makes the compute stream wait for that copy (an event, not a host wait) and hands the
// tensor over. Nothing is read before its copy completes.
//
// On the CPU the same calls copy host to host on one worker thread, with futures for events:
// the path is exercised (and tested) without a GPU. `copy_delay` (tests) sleeps before every
// copy on that thread, so a reader that did not wait would read a buffer not yet written.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "cluster/host_memory.hpp"

namespace superoffload::zero {

class ActivationOffload {
 public:
  // `device`: where the layers run. `pin`: page-locked host buffers (a GPU run).
  ActivationOffload(at::Device device, bool pin, std::chrono::milliseconds copy_delay = {});
  ~ActivationOffload();
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  // Starts copying `input` (layer `layer`'s checkpointed input) into its host buffer. The
  // caller drops its reference; the copy keeps what it needs.
  void store(size_t layer, const at::Tensor& input);
  // Starts bringing layer `layer`'s input back to the device (no-op if already started).
  void prefetch(size_t layer);
  // Layer `layer`'s input, usable by the compute stream (the host waits only on the CPU).
  at::Tensor take(size_t layer);

  // Host bytes held (buffers are kept per layer and reused by later micro-batches).
  int64_t host_bytes() const { return host_bytes_; }
  bool pinned() const { return memory_.pinned(); }
  // Seconds the compute side waited for copies (on the CPU; a GPU waits on its stream).
  double wait_seconds() const { return wait_s_; }
  // Bytes copied each way since construction.
  int64_t bytes_stored() const { return bytes_stored_; }

 private:
  struct Slot {
    at::Tensor host;                        // this layer's buffer, [numel] of the input's dtype
    std::vector<int64_t> sizes;             // the input's shape
    at::ScalarType dtype = at::kFloat;
    bool stored = false;                    // a store is pending or done, not yet taken
    at::Tensor fetched;                     // the device tensor a prefetch writes
    std::optional<c10::Event> copied_back;  // GPU: the prefetch's copy
    std::shared_future<void> cpu_stored, cpu_fetched;  // CPU: the worker's copies
  };
  Slot& slot(size_t layer);
  std::shared_future<void> on_worker(std::function<void()> copy);
  void worker_loop();

  at::Device device_;
  cluster::HostMemory memory_;
  std::chrono::milliseconds copy_delay_;
  std::vector<Slot> slots_;
  std::optional<c10::Stream> copy_stream_;  // GPU
  int64_t host_bytes_ = 0, bytes_stored_ = 0;
  double wait_s_ = 0;

  // CPU: one copy thread, first in first out (a fetch never overtakes its store).
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace superoffload::zero
