// HostMemory.
#include "cluster/host_memory.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "base/logging.hpp"
#include "base/parallel_ranges.hpp"
#include "cluster/compute_threads.hpp"
#include "cluster/host_pinning.hpp"

namespace superoffload::cluster {
namespace {

// Writes one byte of every page, on the rank's threads (as many as its binding gives it), in
// chunks of 2 MiB (a huge page): the kernel allocates and zeroes each page at its
// first write, and places it on the NUMA node of the thread that writes it. Without this,
// cudaHostRegister faults every page in on the calling thread: 2.5 GB/s for untouched pages
// on an H200 machine, most of the 64 s that an 8B's optimizer state took before step 1.
void touch_pages(char* data, size_t bytes, size_t page) {
  constexpr size_t kChunk = size_t{2} << 20;
  const auto chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
  base::parallel_ranges(chunks, compute_threads(), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const size_t from = static_cast<size_t>(c) * kChunk, to = std::min(bytes, from + kChunk);
      for (size_t at = from; at < to; at += page) static_cast<volatile char*>(data)[at] = 0;
    }
  });
}

}  // namespace

HostMemory::HostMemory(bool pin, int64_t planned_bytes, std::string purpose, std::string setting)
    : purpose_(std::move(purpose)), setting_(std::move(setting)) {
  if (!pin) return;
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      static_cast<int64_t>(limit.rlim_cur) < planned_bytes) {
    why_not_ = "RLIMIT_MEMLOCK (ulimit -l) is " + std::to_string(limit.rlim_cur / 1024) + " KiB but " +
               std::to_string(planned_bytes / (1024 * 1024)) + " MiB would be pinned";
    SO_LOG(warning) << purpose_ << " is not pinned: " << why_not_
                    << "; device copies will be slower. HINT: raise it (`ulimit -l unlimited` in the job script, "
                       "or the site's limits.conf / Slurm PropagateResourceLimits), or set "
                    << setting_ << " = false";
    return;
  }
  pin_ = true;
}

at::Tensor HostMemory::zeros(at::IntArrayRef sizes, at::ScalarType type) {
  const bool was_pinned = pin_;
  auto t = empty(sizes, type);
  // A pinned buffer is a fresh mapping (empty() below); anything else came from LibTorch.
  if (!(was_pinned && pin_)) t.zero_();
  return t;
}

at::Tensor HostMemory::empty(at::IntArrayRef sizes, at::ScalarType type) {
  if (pin_) {
    // Mapped and registered at the size asked for: LibTorch's pinned allocator would round each
    // buffer up to a power of two (up to twice the host memory of the plan).
    const int64_t numel = c10::multiply_integers(sizes);
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t bytes = std::max<size_t>(page, (static_cast<size_t>(numel) * c10::elementSize(type) + page - 1) / page * page);
    void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    std::string why;
    if (data == MAP_FAILED) {
      why = "mmap of " + std::to_string(bytes >> 20) + " MiB: " + std::strerror(errno);
    } else {
      ::madvise(data, bytes, MADV_HUGEPAGE);  // the CPU optimizer streams through it: fewer TLB misses
      touch_pages(static_cast<char*>(data), bytes, page);
      if (cluster::pin_host_range(data, bytes, why)) {
        return at::from_blob(
            data, sizes,
            [bytes](void* p) {
              cluster::unpin_host_range(p);
              ::munmap(p, bytes);
            },
            at::TensorOptions().dtype(type));
      }
      ::munmap(data, bytes);
    }
    pin_ = false;
    why_not_ = why;
    SO_LOG(warning) << "pinning " << purpose_ << " failed (" << why_not_
                    << "); using plain memory. HINT: check `ulimit -l` and free host memory";
  }
  return at::empty(sizes, at::TensorOptions().dtype(type));
}

}  // namespace superoffload::cluster
