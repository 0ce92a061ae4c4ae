// HostMemory.
#include "cluster/host_memory.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "base/fresh_memory.hpp"
#include "base/logging.hpp"
#include "cluster/compute_threads.hpp"
#include "cluster/host_pinning.hpp"

namespace superoffload::cluster {
namespace {

// Makes every page of [data, data + bytes) resident, on the rank's threads (as many as its
// binding gives it), in chunks of 2 MiB (a huge page): the kernel allocates and zeroes each page,
// and places it on the NUMA node of the thread that populates it (or, where the kernel cannot
// populate, writes a byte of it: a fault per page, 1.4x slower on this project's VM).
// `zero`: each chunk is also zeroed right after, while it is in that thread's cache (memory that
// LibTorch's allocator may have used before; a fresh mapping is zero already). Without this,
// cudaHostRegister faults every page in on the calling thread: 2.5 GB/s for untouched pages
// on an H200 machine, most of the 64 s that an 8B's optimizer state took before step 1.
void make_resident(char* data, size_t bytes, bool zero) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  base::for_each_page_chunk(data, bytes, compute_threads(), [zero, page](char* at, size_t length) {
    if (zero) {
      base::populate_for_write(at, length);
      std::memset(at, 0, length);
    } else if (!base::populate_for_write(at, length)) {
      for (size_t p = 0; p < length; p += page) reinterpret_cast<volatile char*>(at)[p] = 0;
      reinterpret_cast<volatile char*>(at)[length - 1] = 0;
    }
  });
}

// The bytes of a mapping of its own for `sizes` x `type`: whole pages, at least one.
size_t mapping_bytes(at::IntArrayRef sizes, at::ScalarType type) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t used = static_cast<size_t>(c10::multiply_integers(sizes)) * c10::elementSize(type);
  return std::max<size_t>(page, (used + page - 1) / page * page);
}

// Buffers cut from a region start at this boundary (a cache line, and a multiple of the 256
// bytes that DMA engines fetch at full speed from).
constexpr size_t kRegionAlignment = 256;

}  // namespace

// A mapping of fresh pages, pinned or not, unmapped when its last buffer is freed.
struct HostMemory::Region {
  char* data = nullptr;
  size_t bytes = 0;
  bool pinned = false;
  ~Region() {
    if (pinned) cluster::unpin_host_range(data);
    ::munmap(data, bytes);
  }
};

std::shared_ptr<HostMemory::Region> HostMemory::map_region(size_t bytes) {
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  std::string why;
  std::shared_ptr<Region> region;
  if (data == MAP_FAILED) {
    why = "mmap of " + std::to_string(bytes >> 20) + " MiB: " + std::strerror(errno);
  } else {
    region = std::make_shared<Region>();
    region->data = static_cast<char*>(data);
    region->bytes = bytes;
    if (pin_) ::madvise(data, bytes, MADV_HUGEPAGE);  // the CPU optimizer streams through it: fewer TLB misses
    make_resident(region->data, bytes, /*zero=*/false);
    if (!pin_ || cluster::pin_host_range(data, bytes, why)) {
      region->pinned = pin_;
      return region;
    }
  }
  if (pin_) {
    pin_ = false;
    why_not_ = why;
    SO_LOG(warning) << "pinning " << purpose_ << " failed (" << why_not_
                    << "); using plain memory. HINT: check `ulimit -l` and free host memory";
  }
  return region;  // resident and zero, not pinned; null where the mapping failed
}

void HostMemory::reserve(int64_t bytes, int64_t buffers) {
  if (bytes <= 0) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t wanted = static_cast<size_t>(bytes) + static_cast<size_t>(std::max<int64_t>(buffers, 1)) * kRegionAlignment;
  // Null where the mapping failed: each buffer is then made on its own, and fails there with a message.
  region_ = map_region((wanted + page - 1) / page * page);
  region_used_ = 0;
}

at::Tensor HostMemory::from_region(at::IntArrayRef sizes, at::ScalarType type) {
  if (!region_) return {};
  const size_t bytes = static_cast<size_t>(c10::multiply_integers(sizes)) * c10::elementSize(type);
  const size_t at = (region_used_ + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
  if (at + bytes > region_->bytes) return {};
  region_used_ = at + bytes;
  return at::from_blob(region_->data + at, sizes, [region = region_](void*) {}, at::TensorOptions().dtype(type));
}

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
  if (auto t = from_region(sizes, type); t.defined()) return t;  // fresh pages: zero already
  if (!pin_) return plain(sizes, type, /*zero=*/true);
  auto t = empty(sizes, type);  // pinned: a fresh mapping, zero already
  if (!pin_) t.zero_();         // pinning failed just now: empty() gave plain memory
  return t;
}

at::Tensor HostMemory::plain(at::IntArrayRef sizes, at::ScalarType type, bool zero) {
  // A buffer of 4 MiB or more (glibc's mmap threshold here: it would be a mapping of its own
  // anyway) is mapped directly: fresh anonymous pages are zero, so a zeroed buffer (the moments)
  // costs no pass of its own over the memory.
  if (const size_t bytes = mapping_bytes(sizes, type); bytes >= (size_t{4} << 20)) {
    void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data != MAP_FAILED) {
      make_resident(static_cast<char*>(data), bytes, /*zero=*/false);
      return at::from_blob(data, sizes, [bytes](void* p) { ::munmap(p, bytes); }, at::TensorOptions().dtype(type));
    }
  }
  auto t = at::empty(sizes, at::TensorOptions().dtype(type));
  make_resident(static_cast<char*>(t.data_ptr()), t.nbytes(), zero);
  return t;
}

at::Tensor HostMemory::empty(at::IntArrayRef sizes, at::ScalarType type) {
  if (auto t = from_region(sizes, type); t.defined()) return t;
  if (pin_) {
    // Mapped and registered at the size asked for: LibTorch's pinned allocator would round each
    // buffer up to a power of two (up to twice the host memory of the plan).
    if (auto region = map_region(mapping_bytes(sizes, type)); region && region->pinned) {
      return at::from_blob(region->data, sizes, [region](void*) {}, at::TensorOptions().dtype(type));
    }
  }
  return plain(sizes, type, /*zero=*/false);
}

}  // namespace superoffload::cluster
