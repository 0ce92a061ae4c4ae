// NvmeStateFile.
#include "optim/nvme_state.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/check_sys.hpp"
#include "base/error.hpp"
#include "base/timer.hpp"

namespace superoffload::optim {

namespace fs = std::filesystem;

struct NvmeStateFile::Ring {
  io_uring ring{};
  bool ready = false;
  ~Ring() {
    if (ready) io_uring_queue_exit(&ring);
  }
};

namespace {

constexpr uint64_t kBlock = 4096;                 // O_DIRECT alignment of offsets, lengths, buffers
constexpr uint64_t kMaxRequest = uint64_t{1} << 30;  // bytes per io_uring request
constexpr unsigned kQueueDepth = 64;

uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

constexpr const char* kNvmeHint = "[offload] nvme_path must be a directory on a local file system with O_DIRECT "
                                  "(an NVMe drive: ext4, xfs), writable, with room for the optimizer state";

}  // namespace

NvmeStateFile::NvmeStateFile(const fs::path& directory, int rank, const std::vector<uint64_t>& region_bytes,
                             size_t buffer_count) {
  SO_CHECK(buffer_count >= 1, "[offload] buffer_count must be at least 1");
  uint64_t total = 0, largest = 0;
  for (uint64_t bytes : region_bytes) {
    offsets_.push_back(total);
    bytes_.push_back(bytes);
    total += round_up(bytes, kBlock);
    largest = std::max(largest, round_up(bytes, kBlock));
  }
  buffer_bytes_ = largest;
  // Ring and buffers first: once the file exists, only its own failures remain.
  auto ring = std::make_unique<Ring>();
  const int rc = io_uring_queue_init(kQueueDepth, &ring->ring, 0);
  SO_CHECK(rc == 0, "io_uring_queue_init failed: " << std::strerror(-rc)
                                                   << hint("io_uring needs Linux 5.1 or later and may be disabled by "
                                                           "the kernel (sysctl kernel.io_uring_disabled)"));
  ring->ready = true;
  ring_ = std::move(ring);
  slots_.resize(buffer_count);
  for (auto& slot : slots_) {
    void* memory = nullptr;
    SO_CHECK(::posix_memalign(&memory, kBlock, std::max<uint64_t>(buffer_bytes_, kBlock)) == 0,
             "cannot allocate " << buffer_bytes_ << " bytes for an NVMe buffer"
                                << hint("lower [zero] sub_group_size or [offload] buffer_count"));
    slot.data.reset(static_cast<char*>(memory));
  }

  std::error_code error;
  SO_CHECK(fs::is_directory(directory, error),
           "[offload] nvme_path = \"" << directory.string() << "\" is not an existing directory"
                                      << hint("create it on the node-local NVMe drive, e.g. mkdir -p " +
                                              directory.string()));
  // tmpfs takes O_DIRECT since Linux 6.6, but it is host memory: the state would take the
  // memory the tier exists to free.
  struct statfs about {};
  if (::statfs(directory.c_str(), &about) == 0 && (about.f_type == TMPFS_MAGIC || about.f_type == RAMFS_MAGIC)) {
    throw Error("[offload] nvme_path = \"" + directory.string() +
                    "\" is on a tmpfs (host memory), not a drive: the NVMe tier keeps the optimizer state out of host "
                    "memory",
                kNvmeHint, Error::UserInput{});
  }
  const fs::path path =
      directory / ("superoffload_optimizer_rank" + std::to_string(rank) + "." + std::to_string(::getpid()) + ".swap");
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
  if (fd_ < 0 && errno == EINVAL) {  // O_DIRECT refused: tmpfs, some network file systems
    ::unlink(path.c_str());
    throw Error("[offload] nvme_path = \"" + directory.string() +
                    "\" is on a file system without O_DIRECT (tmpfs?): the NVMe tier reads and writes the disk "
                    "directly",
                kNvmeHint, Error::UserInput{});
  }
  SO_CHECK_SYS(fd_, "creating the optimizer state file " << path.string() << hint(kNvmeHint));
  path_ = path;  // from here on the destructor removes it
  // Reserved now: ENOSPC here names the size, instead of a write failing in step 1000.
  if (total > 0) {
    const int reserved = ::posix_fallocate(fd_, 0, static_cast<off_t>(total));
    if (reserved != 0) {
      ::close(fd_);
      fd_ = -1;
      ::unlink(path_.c_str());
      path_.clear();
      throw Error("[offload] nvme_path = \"" + directory.string() + "\": cannot reserve " + std::to_string(total) +
                      " bytes for rank " + std::to_string(rank) + "'s optimizer state (" + std::strerror(reserved) + ")",
                  reserved == ENOSPC ? "free space there, or use more ranks or nodes (the state is split over them)"
                                     : kNvmeHint,
                  Error::UserInput{});
    }
  }
}

NvmeStateFile::~NvmeStateFile() {
  try {
    while (in_flight_ > 0) reap(true);
  } catch (...) {
    // Nothing more to do with this file: it is removed below.
  }
  if (fd_ >= 0) ::close(fd_);
  if (!path_.empty()) ::unlink(path_.c_str());
}

void NvmeStateFile::Free::operator()(char* p) const { std::free(p); }

uint64_t NvmeStateFile::io_bytes(size_t region) const { return round_up(bytes_[region], kBlock); }

void NvmeStateFile::submit(Slot& slot, bool write) {
  const auto region = static_cast<size_t>(slot.region);
  const uint64_t total = io_bytes(region);
  for (uint64_t done = 0; done < total; done += kMaxRequest) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
    while (sqe == nullptr) {  // the submission queue is full: make room
      io_uring_submit(&ring_->ring);
      reap(true);
      sqe = io_uring_get_sqe(&ring_->ring);
    }
    const auto length = static_cast<unsigned>(std::min(kMaxRequest, total - done));
    if (write) {
      io_uring_prep_write(sqe, fd_, slot.data.get() + done, length, offsets_[region] + done);
    } else {
      io_uring_prep_read(sqe, fd_, slot.data.get() + done, length, offsets_[region] + done);
    }
    // user_data: the slot, and the length expected back.
    io_uring_sqe_set_data64(sqe, (static_cast<uint64_t>(&slot - slots_.data()) << 32) | length);
    ++slot.pending;
    ++in_flight_;
  }
  slot.state = write ? SlotState::writing : SlotState::reading;
  const int rc = io_uring_submit(&ring_->ring);
  SO_CHECK(rc >= 0, "io_uring_submit on " << path_.string() << " failed: " << std::strerror(-rc));
  (write ? stats_.bytes_written : stats_.bytes_read) += total;
}

void NvmeStateFile::reap(bool wait) {
  for (bool first = true;; first = false) {
    io_uring_cqe* cqe = nullptr;
    int rc = (wait && first) ? io_uring_wait_cqe(&ring_->ring, &cqe) : io_uring_peek_cqe(&ring_->ring, &cqe);
    if (rc == -EINTR) continue;
    if (rc == -EAGAIN || cqe == nullptr) return;
    SO_CHECK(rc == 0, "waiting for I/O on " << path_.string() << " failed: " << std::strerror(-rc));
    const uint64_t data = io_uring_cqe_get_data64(cqe);
    const int result = cqe->res;
    io_uring_cqe_seen(&ring_->ring, cqe);
    --in_flight_;
    auto& slot = slots_[data >> 32];
    const auto expected = static_cast<int64_t>(data & 0xffffffffu);
    const bool writing = slot.state == SlotState::writing;
    if (result != expected) {
      // The disk failed (EIO), filled (ENOSPC on a sparse file), or returned less than asked.
      throw Error("optimizer state file " + path_.string() + ": " + (writing ? "writing" : "reading") + " " +
                      std::to_string(expected) + " bytes returned " +
                      (result < 0 ? std::string(std::strerror(-result)) : std::to_string(result) + " bytes"),
                  kNvmeHint);
    }
    if (--slot.pending == 0) slot.state = SlotState::ready;
  }
}

NvmeStateFile::Slot* NvmeStateFile::slot_of(size_t region) {
  for (auto& slot : slots_) {
    if (slot.region == static_cast<int64_t>(region)) return &slot;
  }
  return nullptr;
}

NvmeStateFile::Slot* NvmeStateFile::free_slot(bool for_acquire) {
  for (;;) {
    reap(false);
    Slot *used = nullptr, *fresh = nullptr;
    for (auto& slot : slots_) {
      if (slot.held) continue;
      if (slot.state == SlotState::empty) return &slot;
      if (slot.state != SlotState::ready) continue;
      auto& best = slot.fresh ? fresh : used;
      if (!best || slot.last_use < best->last_use) best = &slot;
    }
    if (used) return used;
    if (!for_acquire) return nullptr;  // a read ahead never displaces another one
    if (fresh) return fresh;
    if (in_flight_ == 0) return nullptr;
    const double start = base::now_s();
    reap(true);
    stats_.wait_s += base::now_s() - start;
  }
}

char* NvmeStateFile::acquire(size_t region, bool load) {
  Slot* slot = slot_of(region);
  if (!slot) {
    slot = free_slot(true);
    SO_CHECK(slot, "no NVMe buffer is free (" << slots_.size() << " held)"
                                               << hint("raise [offload] buffer_count"));
    slot->region = static_cast<int64_t>(region);
    if (load) {
      submit(*slot, /*write=*/false);
    } else {
      slot->state = SlotState::ready;
    }
  }
  // A read must land, and a write of this buffer must finish before it is changed again.
  const double start = base::now_s();
  while (slot->state != SlotState::ready) reap(true);
  stats_.wait_s += base::now_s() - start;
  slot->held = true;
  slot->fresh = false;
  slot->last_use = ++clock_;
  return slot->data.get();
}

void NvmeStateFile::release(size_t region, bool dirty) {
  Slot* slot = slot_of(region);
  SO_CHECK(slot && slot->held, "NVMe region " << region << " released without being acquired");
  slot->held = false;
  if (dirty) submit(*slot, /*write=*/true);
}

void NvmeStateFile::prefetch(size_t region) {
  if (slot_of(region)) return;
  Slot* slot = free_slot(false);
  if (!slot) return;
  slot->region = static_cast<int64_t>(region);
  slot->fresh = true;
  slot->last_use = ++clock_;
  submit(*slot, /*write=*/false);
}

void NvmeStateFile::flush() {
  const double start = base::now_s();
  while (in_flight_ > 0) reap(true);
  stats_.wait_s += base::now_s() - start;
}

}  // namespace superoffload::optim
