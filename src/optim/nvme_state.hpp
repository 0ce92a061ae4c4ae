// The NVMe tier of the optimizer state (DeepSpeed's offload_optimizer device "nvme",
// ZeRO-Infinity): each CPU sub-group's state (fp32 master unless it is the engine's own
// shard, and both moments) lives in one region of a per-rank file under nvme_path, and only a
// ring of `buffer_count` page-aligned buffers is in host memory. The optimizer acquires a
// sub-group's buffer (read from the file when it is not held), steps it and releases it; a
// released buffer is written back while the CPU steps the next one, and the regions it will
// need next are read ahead (prefetch). Reads and writes go through io_uring (liburing) with
// O_DIRECT, so the page cache neither doubles the memory nor hides the disk.
//
// Used by one thread at a time (the speculation worker during backward, the training thread
// at step end and between steps), never by two at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace superoffload::optim {

struct NvmeStats {
  uint64_t bytes_read = 0, bytes_written = 0;
  double wait_s = 0;  // time acquire() and flush() waited for the disk
};

class NvmeStateFile {
 public:
  // Creates `<directory>/superoffload_optimizer_rank<rank>.<pid>.swap` with one region of
  // `region_bytes[i]` bytes per sub-group, allocated on the disk at once (a full disk fails
  // here, not mid-run). Errors name the path and what to do: a missing or unwritable
  // directory, a file system without O_DIRECT (tmpfs), no space.
  NvmeStateFile(const std::filesystem::path& directory, int rank, const std::vector<uint64_t>& region_bytes,
                size_t buffer_count);
  ~NvmeStateFile();  // waits for writes in flight and removes the file
  NvmeStateFile(const NvmeStateFile&) = delete;
  NvmeStateFile& operator=(const NvmeStateFile&) = delete;

  // The buffer holding `region` (64-byte aligned, region_bytes[region] long), read from the
  // file unless a buffer holds it already, or unless `load` is false (the caller overwrites
  // all of it: the initial state, a checkpoint's). Valid until release(region).
  char* acquire(size_t region, bool load = true);
  // `dirty`: the buffer was changed and is written back (asynchronously).
  void release(size_t region, bool dirty);
  // Starts reading `region` into a free buffer, if one is free without waiting.
  void prefetch(size_t region);
  // Waits until every write has reached the file.
  void flush();

  const std::filesystem::path& path() const { return path_; }
  size_t buffer_count() const { return slots_.size(); }
  uint64_t buffer_bytes() const { return buffer_bytes_; }
  const NvmeStats& stats() const { return stats_; }

 private:
  enum class SlotState { empty, reading, ready, writing };
  struct Free {
    void operator()(char* p) const;
  };
  struct Slot {
    std::unique_ptr<char, Free> data;
    int64_t region = -1;
    SlotState state = SlotState::empty;
    int pending = 0;  // requests in flight
    bool held = false;
    bool fresh = false;  // read ahead and not acquired yet: evicted only when nothing else is free
    uint64_t last_use = 0;
  };
  uint64_t io_bytes(size_t region) const;  // region bytes rounded up to the O_DIRECT block
  void submit(Slot& slot, bool write);
  // Handles completions; with `wait`, blocks for at least one.
  void reap(bool wait);
  // A slot free for a new region: empty, or ready and not held, least recently used, one read
  // ahead and still unused only for an acquire (`for_acquire`, which also waits for a write to
  // finish if that is all there is). Null when there is none.
  Slot* free_slot(bool for_acquire);
  Slot* slot_of(size_t region);

  std::filesystem::path path_;
  int fd_ = -1;
  struct Ring;  // liburing's io_uring, kept out of this header
  std::unique_ptr<Ring> ring_;
  std::vector<uint64_t> offsets_, bytes_;
  uint64_t buffer_bytes_ = 0;
  std::vector<Slot> slots_;
  uint64_t clock_ = 0;
  unsigned in_flight_ = 0;
  NvmeStats stats_;
};

}  // namespace superoffload::optim
