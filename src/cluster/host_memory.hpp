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
  bool pinned() const { return pin_; }
  const std::string& why_not_pinned() const { return why_not_; }

 private:
  at::Tensor plain(at::IntArrayRef sizes, at::ScalarType type, bool zero);

  bool pin_ = false;
  std::string why_not_;
  std::string purpose_, setting_;
};

}  // namespace superoffload::cluster
