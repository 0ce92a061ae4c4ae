// The rank file of checkpoint format 2: an HDF5 file (h5py and every HDF5 tool read it as any
// other) whose datasets are 1-D and contiguous, and whose bytes do not pass through HDF5. HDF5
// lays out the structure (datasets allocated at creation, never filled, metadata checksummed
// by HDF5's 1.10 format); the data goes from the caller's buffers to its file offsets with
// pwrite, and comes back straight into the destination: with pread from the drive, or copied
// out of a mapping of the page cache and checksummed in the same pass. Each dataset carries the
// CRC32C of every block of `crc32c_block_bytes` bytes as its attribute `crc32c`, so a reader
// verifies exactly what it reads, a slice of a dataset included (resharding), at the cost of
// the blocks at its two ends.
//
// Format 1 stored chunked datasets with HDF5's Fletcher32 filter, read through hyperslab
// selections: a sixth of the disk's speed. See checkpoint_files.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/descriptor.hpp"
#include "io/hdf5_file.hpp"

namespace superoffload::io {

enum class ElementType { f32, i64, u8 };

// One dataset to write: `count` elements at `data` (host memory, native little-endian), or
// where `fetch` is set, at the pointer it returns when the dataset's turn comes (datasets are
// written in order, each once; the pointer need stay valid only until the next dataset's).
struct DatasetSource {
  std::string name;  // "layers/00003/master"
  ElementType type = ElementType::f32;
  const void* data = nullptr;
  uint64_t count = 0;
  std::function<const void*()> fetch;
};

struct WrittenFile {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;  // of the whole file, as read back
};

// Where the read-back after a write comes from. page_cache: the file's pages as the kernel
// holds them, read while fsync pushes them to the drive (the write path checked at no cost in
// bandwidth). device: after fsync, the file's (clean) pages are dropped from the cache and the
// read-back comes from the drive itself: the CRCs are those of the bytes on the device, at the
// cost of reading every file once more ([checkpoint] verify_from_disk).
enum class ReadBack { page_cache, device };

// Writes `datasets` to `path` (created or truncated), then fsyncs it and reads it back whole:
// every block must match the CRC32C taken of it in memory, or this throws naming the dataset.
// `progress` (optional) hears each dataset as it is written.
WrittenFile write_rank_file(const std::filesystem::path& path, const std::vector<DatasetSource>& datasets,
                            const std::function<void(const std::string&)>& progress = nullptr,
                            ReadBack read_back_from = ReadBack::page_cache);

class RankFileReader {
 public:
  // The largest piece of the file one thread of a read from the page cache maps at a time (its
  // pages count in the resident set while mapped): a read holds at most min(threads, 16) of them.
  static constexpr uint64_t kReadWindowBytes = uint64_t{32} << 20;
  static constexpr int kMaxReadThreads = 16;
  // `threads`: how many threads a read from the page cache may use (each copies and checks a
  // share of the blocks); a read from the drive is one stream, with one thread checking behind.
  explicit RankFileReader(const std::filesystem::path& path, int threads = 1);
  RankFileReader(const RankFileReader&) = delete;
  RankFileReader& operator=(const RankFileReader&) = delete;

  bool has(const std::string& dataset) const { return file_.has(dataset); }
  uint64_t count(const std::string& dataset);
  // Elements [begin, begin + count) of `dataset` into `out`, each block checked against its
  // CRC32C; a mismatch throws naming the file, the dataset and the bytes.
  void read(const std::string& dataset, uint64_t begin, uint64_t count, void* out);
  // Whether the file was wholly in the page cache at open: reads then copy and checksum from
  // a mapping of it in one pass; otherwise they stream it with pread and check behind.
  bool reads_from_page_cache() const { return cached_; }

 private:
  struct Layout {
    Hdf5File::Extent extent;
    uint64_t block_bytes = 0;
    std::vector<uint32_t> crcs;
  };
  const Layout& layout(const std::string& dataset);
  // Whether the whole file behind `fd` is in the page cache (false when the kernel cannot tell).
  static bool wholly_cached(int fd);
  std::filesystem::path path_;
  Descriptor data_;  // the data is read through it; opened before HDF5's open, so closed if that fails
  bool cached_;      // the whole file was in the page cache at open
  Hdf5File file_;
  int threads_ = 1;
  std::map<std::string, Layout> layouts_;
};

}  // namespace superoffload::io
