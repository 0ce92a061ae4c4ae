// BufferCache.
#include "zero/buffer_cache.hpp"

namespace superoffload::zero {

at::Tensor BufferCache::take(int64_t numel, const at::TensorOptions& options) {
  for (auto it = free_.rbegin(); it != free_.rend(); ++it) {  // the most recently given first: warm in cache
    if (it->numel() == numel && it->scalar_type() == options.dtype().toScalarType() && it->device() == options.device()) {
      auto buffer = std::move(*it);
      free_.erase(std::next(it).base());
      return buffer;
    }
  }
  return at::empty({numel}, options);
}

void BufferCache::give(at::Tensor buffer) {
  // A buffer still viewed elsewhere (a parameter, an autograd graph) is not reused.
  if (!enabled_ || !buffer.defined() || buffer.storage().use_count() > 1) return;
  free_.push_back(std::move(buffer));
  if (free_.size() > max_free_) free_.erase(free_.begin());
}

}  // namespace superoffload::zero
