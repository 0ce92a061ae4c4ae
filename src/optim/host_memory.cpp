// HostMemory.
#include "optim/host_memory.hpp"

#include <sys/resource.h>

#include "base/logging.hpp"

namespace superoffload::optim {

HostMemory::HostMemory(bool pin, int64_t planned_bytes) {
  if (!pin) return;
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      static_cast<int64_t>(limit.rlim_cur) < planned_bytes) {
    why_not_ = "RLIMIT_MEMLOCK (ulimit -l) is " + std::to_string(limit.rlim_cur / 1024) + " KiB but " +
               std::to_string(planned_bytes / (1024 * 1024)) + " MiB would be pinned";
    SO_LOG(warning) << "optimizer host memory is not pinned: " << why_not_
                    << "; device copies will be slower. HINT: raise it (`ulimit -l unlimited` in the job script, "
                       "or the site's limits.conf / Slurm PropagateResourceLimits), or set [offload] pin_memory = false";
    return;
  }
  pin_ = true;
}

at::Tensor HostMemory::empty(at::IntArrayRef sizes, at::ScalarType type) {
  if (pin_) {
    try {
      return at::empty(sizes, at::TensorOptions().dtype(type).pinned_memory(true));
    } catch (const std::exception& e) {
      pin_ = false;
      why_not_ = e.what();
      SO_LOG(warning) << "pinning optimizer host memory failed (" << why_not_.substr(0, why_not_.find('\n'))
                      << "); using plain memory. HINT: check `ulimit -l` and free host memory";
    }
  }
  return at::empty(sizes, at::TensorOptions().dtype(type));
}

}  // namespace superoffload::optim
