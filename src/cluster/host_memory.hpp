// Host buffers that a GPU copies to and from: the offloaded optimizer's state and gradients, and
// activation checkpoints kept in host memory. With a GPU and pinning wanted, page-locked
// (pinned) memory, so device copies run at full link speed and asynchronously (mapped at the
// size asked for and registered with the CUDA runtime: cluster/host_pinning.hpp); when pinning
// fails, or RLIMIT_MEMLOCK (`ulimit -l`) is smaller than what will be pinned — a known source
// of host out-of-memory kills with DeepSpeed — plain memory is used instead, with a warning
// that says how to fix it. CPU-only runs use plain memory.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>

namespace superoffload::cluster {

class HostMemory {
 public:
  // `pin`: a GPU is used and pinning is wanted. `planned_bytes`: what will be allocated.
  // `purpose` names the buffers in warnings ("optimizer host memory"), `setting` the switch
  // that turns pinning off ("[offload] pin_memory").
  HostMemory(bool pin, int64_t planned_bytes, std::string purpose = "optimizer host memory",
             std::string setting = "[offload] pin_memory");
  // An fp32/bf16 host tensor, pinned when possible; resident (its pages made by the rank's
  // threads, on their NUMA node) before it is returned.
  at::Tensor empty(at::IntArrayRef sizes, at::ScalarType type);
  // The same, zeroed: pinned buffers are fresh anonymous mappings, zero already, so their
  // zeroing is not a second pass over the memory; so are plain ones of 4 MiB or more, and
  // smaller plain ones are zeroed as they are made resident.
  at::Tensor zeros(at::IntArrayRef sizes, at::ScalarType type);
  // Maps, makes resident and pins in one go the memory for the next `buffers` buffers of
  // `bytes` in all, which empty() and zeros() then cut from it (each at a 256-byte boundary;
  // what does not fit is mapped on its own as without it). One mapping populated by all the
  // rank's threads at once, and one registration with CUDA: buffers made one by one took a
  // thread start, a page-table walk and (pinned) a registration each, and a buffer of a few
  // MiB was populated by one thread (0.55B at 1 rank, 930 buffers of 2-4 MiB: 0.72-0.78 s
  // against the first-touch bound's 0.46 s). The region is freed with its last buffer.
  void reserve(int64_t bytes, int64_t buffers);
  bool pinned() const { return pin_; }
  const std::string& why_not_pinned() const { return why_not_; }

 private:
  at::Tensor plain(at::IntArrayRef sizes, at::ScalarType type, bool zero);
  // A buffer cut from the reserved region; undefined when the region has no room for it.
  at::Tensor from_region(at::IntArrayRef sizes, at::ScalarType type);

  struct Region;
  // A fresh mapping of `bytes` (whole pages), resident, and pinned while pin_ holds; a failed
  // pinning turns pin_ off with a warning (the mapping is returned unpinned), a failed mapping
  // returns null.
  std::shared_ptr<Region> map_region(size_t bytes);
  std::shared_ptr<Region> region_;
  size_t region_used_ = 0;

  bool pin_ = false;
  std::string why_not_;
  std::string purpose_, setting_;
};

}  // namespace superoffload::cluster
