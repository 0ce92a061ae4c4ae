// Layer-sized buffers kept for reuse on a CPU run. Every step gathers each layer twice and
// flattens its gradients once; on the host each such buffer would be a fresh mapping (the
// trainer has glibc map large blocks and return them on free, base/allocator.hpp), so every
// page would fault and be zeroed again — about a tenth of a step at 2 ranks. Decoder layers
// share one size, so a handful of free buffers serves them all. On a GPU, LibTorch's caching
// allocator already reuses memory (and knows the streams): the cache is off there.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <vector>

namespace superoffload::zero {

class BufferCache {
 public:
  // `enabled` false: take() allocates and give() frees, as without a cache.
  BufferCache(bool enabled, size_t max_free) : enabled_(enabled), max_free_(max_free) {}

  // An uninitialised [numel] tensor: a free buffer of that size and type, else a new one.
  at::Tensor take(int64_t numel, const at::TensorOptions& options);
  // Returns a buffer nothing refers to any more (the oldest free one is dropped past max_free).
  void give(at::Tensor buffer);
  size_t free_buffers() const { return free_.size(); }

 private:
  bool enabled_;
  size_t max_free_;
  std::vector<at::Tensor> free_;
};

}  // namespace superoffload::zero
