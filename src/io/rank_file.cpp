// write_rank_file and RankFileReader.
#include "io/rank_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <exception>
#include <thread>

#include "base/check_sys.hpp"
#include "base/error.hpp"
#include "io/crc32c.hpp"
#include "io/descriptor.hpp"
#include "io/mapped_range.hpp"

namespace superoffload::io {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "rank files store little-endian values and copy host memory to them as it is");

namespace {

constexpr const char* kCrcAttribute = "crc32c";
constexpr const char* kBlockAttribute = "crc32c_block_bytes";

hid_t file_type(ElementType type) {
  switch (type) {
    case ElementType::f32: return H5T_IEEE_F32LE;
    case ElementType::i64: return H5T_STD_I64LE;
    case ElementType::u8: return H5T_STD_U8LE;
  }
  return H5T_STD_U8LE;
}

size_t element_bytes(ElementType type) { return type == ElementType::f32 ? 4 : type == ElementType::i64 ? 8 : 1; }

// 4 MiB blocks (checksummed from cache right after they are read), doubled for datasets so
// large that the list of CRCs would exceed 8192 entries (32 KiB of attribute).
uint64_t block_bytes_for(uint64_t bytes) {
  uint64_t block = uint64_t{4} << 20;
  while (bytes > block * 8192) block *= 2;
  return block;
}

void write_at(int fd, const char* data, uint64_t size, uint64_t offset, const fs::path& path) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    SO_CHECK_SYS(n, "writing " << size << " bytes at offset " << offset << " of " << path.string());
    data += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

void read_at(int fd, char* data, uint64_t size, uint64_t offset, const fs::path& path) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    SO_CHECK_SYS(n, "reading " << size << " bytes at offset " << offset << " of " << path.string());
    SO_CHECK(n > 0, path.string() << " ends at byte " << offset << ", before the data its metadata describes"
                                  << hint("the file was truncated: use another checkpoint"));
    data += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

struct Block {
  uint64_t offset = 0, bytes = 0;  // in the file
  uint32_t crc = 0;                // taken in memory
  const std::string* dataset = nullptr;
  uint64_t dataset_offset = 0;
};

// Reads `path` from start to end and returns its CRC32C; every block must read back with the
// CRC it had in memory. Blocks are sorted by offset and do not overlap.
uint32_t read_back(const fs::path& path, const std::vector<Block>& blocks, uint64_t file_bytes) {
  Descriptor in(path, O_RDONLY);
  ::posix_fadvise(in.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  uint64_t largest = uint64_t{4} << 20;
  for (const auto& block : blocks) largest = std::max(largest, block.bytes);
  std::vector<char> buffer(largest);
  uint32_t crc = 0;
  uint64_t at = 0;
  auto absorb = [&](uint64_t until) {  // bytes between blocks (HDF5's metadata)
    while (at < until) {
      const uint64_t n = std::min<uint64_t>(until - at, buffer.size());
      read_at(in.get(), buffer.data(), n, at, path);
      crc = crc32c(buffer.data(), n, crc);
      at += n;
    }
  };
  for (const auto& block : blocks) {
    absorb(block.offset);
    read_at(in.get(), buffer.data(), block.bytes, at, path);
    SO_CHECK(crc32c(buffer.data(), block.bytes) == block.crc,
             path.string() << ": dataset \"" << *block.dataset << "\" bytes [" << block.dataset_offset << ", "
                           << block.dataset_offset + block.bytes
                           << ") read back differently from what was written"
                           << hint("the storage corrupted the write: check the file system and the disk"));
    crc = crc32c(buffer.data(), block.bytes, crc);
    at += block.bytes;
  }
  absorb(file_bytes);
  return crc;
}

}  // namespace

WrittenFile write_rank_file(const fs::path& path, const std::vector<DatasetSource>& datasets,
                            const std::function<void(const std::string&)>& progress, ReadBack read_back_from) {
  // HDF5 lays out every dataset first; the data is written afterwards through a second
  // descriptor, into space HDF5 reserved and never touches again.
  // Metadata gathered at the start of the file: a reader from a cold cache then finds it in a
  // few sequential reads instead of a seek before every dataset.
  auto file = Hdf5File::create(path.string(), {.latest_format = true, .metadata_block_bytes = size_t{1} << 20});
  std::vector<uint64_t> offsets;
  for (const auto& source : datasets) offsets.push_back(file.create_contiguous(source.name, file_type(source.type), source.count));
  Descriptor out(path, O_WRONLY);
  std::vector<Block> blocks;
  for (size_t d = 0; d < datasets.size(); ++d) {
    const auto& source = datasets[d];
    if (progress) progress("writing " + source.name);
    const uint64_t bytes = source.count * element_bytes(source.type);
    const uint64_t block_bytes = block_bytes_for(bytes);
    std::vector<uint32_t> crcs;
    const char* data = static_cast<const char*>(source.fetch ? source.fetch() : source.data);
    // Checksummed block by block right before it is written, so the write copies from cache.
    for (uint64_t at = 0; at < bytes; at += block_bytes) {
      const uint64_t n = std::min(block_bytes, bytes - at);
      crcs.push_back(crc32c(data + at, n));
      write_at(out.get(), data + at, n, offsets[d] + at, path);
      blocks.push_back({offsets[d] + at, n, crcs.back(), &source.name, at});
    }
    // Start the disk on this dataset now instead of at fsync (plain `write` leaves it all to fsync).
    if (bytes > 0) ::sync_file_range(out.get(), static_cast<off_t>(offsets[d]), static_cast<off_t>(bytes), SYNC_FILE_RANGE_WRITE);
    file.write_attribute(source.name, kCrcAttribute, crcs);
    file.write_attribute(source.name, kBlockAttribute, block_bytes);
  }
  file.close();  // checked: HDF5 writes its metadata here
  std::sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) { return a.offset < b.offset; });
  const uint64_t file_bytes = fs::file_size(path);
  SO_CHECK(blocks.empty() || blocks.back().offset + blocks.back().bytes <= file_bytes,
           path.string() << " is shorter than the data written to it");

  if (progress) progress("syncing and reading back " + path.filename().string());
  if (read_back_from == ReadBack::device) {
    SO_CHECK_SYS(::fsync(out.get()), "fsync of " << path.string());
    // Clean after fsync, the pages can be dropped: the read-back below then comes from the drive.
    ::posix_fadvise(out.get(), 0, 0, POSIX_FADV_DONTNEED);
    out.close();
    return {file_bytes, read_back(path, blocks, file_bytes)};
  }
  int sync_errno = 0;
  std::thread sync([&] {
    if (::fsync(out.get()) != 0) sync_errno = errno;
  });
  WrittenFile written{file_bytes, 0};
  try {
    written.crc32c = read_back(path, blocks, file_bytes);
  } catch (...) {
    sync.join();
    throw;
  }
  sync.join();
  if (sync_errno != 0) {
    errno = sync_errno;
    SO_CHECK_SYS(-1, "fsync of " << path.string());
  }
  out.close();
  return written;
}

// No POSIX_FADV_SEQUENTIAL on the data's descriptor: with it (twice the read-ahead window) cold
// reads ran at 0.81-0.84 of plain read, without it at 0.89-0.90 (bench_checkpoint, 1 rank, back
// to back), the second dataset taking 13-19 ms instead of 6.
RankFileReader::RankFileReader(const fs::path& path, int threads)
    : path_(path),
      data_(path, O_RDONLY),
      cached_(wholly_cached(data_.get())),
      file_(Hdf5File::open_read(path.string())),
      threads_(threads) {}

const RankFileReader::Layout& RankFileReader::layout(const std::string& dataset) {
  if (const auto it = layouts_.find(dataset); it != layouts_.end()) return it->second;
  Layout layout;
  layout.extent = file_.contiguous_extent(dataset);
  layout.block_bytes = file_.read_uint64_attribute(dataset, kBlockAttribute);
  layout.crcs = file_.read_uint32_attribute(dataset, kCrcAttribute);
  const uint64_t blocks = layout.block_bytes == 0 ? 0 : (layout.extent.bytes + layout.block_bytes - 1) / layout.block_bytes;
  SO_CHECK(layout.block_bytes > 0 && layout.crcs.size() == blocks,
           path_.string() << ":" << dataset << " has " << layout.crcs.size() << " block CRCs for " << layout.extent.bytes
                          << " bytes in blocks of " << layout.block_bytes << hint("the file is corrupted"));
  return layouts_.emplace(dataset, std::move(layout)).first->second;
}

bool RankFileReader::wholly_cached(int fd) {
  // Asked once, for the whole file, before any read: read-ahead soon puts parts of a file
  // being read from the disk into the cache, and a read planned for the cache then competes
  // with it.
  // cachestat(2) (Linux 6.5) counts cached pages without reading or mapping anything: a
  // probing read would start the disk where it is not wanted, and mincore needs a mapping,
  // whose set-up and removal slowed the reads from disk that followed it by a third. Older
  // kernels answer ENOSYS, and the data is then read as if from the disk.
  struct stat file{};
  if (::fstat(fd, &file) != 0) return false;
  struct {
    uint64_t offset, length;
  } range{0, static_cast<uint64_t>(file.st_size)};
  struct {
    uint64_t cached, dirty, writeback, evicted, recently_evicted;
  } status{};
  constexpr long kCachestat = 451;  // the same number on every architecture
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return ::syscall(kCachestat, fd, &range, &status, 0) == 0 && status.cached >= (range.length + page - 1) / page;
}

uint64_t RankFileReader::count(const std::string& dataset) {
  const auto& l = layout(dataset);
  return l.extent.element_bytes == 0 ? 0 : l.extent.bytes / l.extent.element_bytes;
}

void RankFileReader::read(const std::string& dataset, uint64_t begin, uint64_t count, void* out) {
  const auto& l = layout(dataset);
  const uint64_t first = begin * l.extent.element_bytes, last = (begin + count) * l.extent.element_bytes;
  SO_CHECK(last <= l.extent.bytes, path_.string() << ":" << dataset << " holds " << l.extent.bytes / l.extent.element_bytes
                                                  << " elements; elements [" << begin << ", " << begin + count
                                                  << ") were asked for");
  if (first == last) return;
  auto* destination = static_cast<char*>(out);
  auto range_of = [&](uint64_t block) {
    const uint64_t block_begin = block * l.block_bytes;
    return std::pair{block_begin, std::min(block_begin + l.block_bytes, l.extent.bytes)};
  };
  auto verify = [&](uint64_t block, uint32_t crc) {
    const auto [block_begin, block_end] = range_of(block);
    SO_CHECK(crc == l.crcs[block],
             path_.string() << ": dataset \"" << dataset << "\" fails its CRC32C check in bytes [" << block_begin
                            << ", " << block_end << "): the file is corrupted"
                            << hint("resume from an older checkpoint (--resume latest falls back by itself)"));
  };
  auto check = [&](uint64_t block, const char* data) {
    const auto [block_begin, block_end] = range_of(block);
    verify(block, crc32c(data, block_end - block_begin));
  };
  // A block at either end of the slice that is only partly wanted is read whole into scratch,
  // checked, and the wanted part copied; the blocks wanted whole, [inner_begin, inner_end),
  // are read straight into their place.
  uint64_t inner_begin = (first + l.block_bytes - 1) / l.block_bytes, inner_end = last / l.block_bytes;
  if (last == l.extent.bytes) inner_end = (last + l.block_bytes - 1) / l.block_bytes;  // a short last block
  std::vector<char> scratch;
  auto read_partly = [&](uint64_t block) {
    const auto [block_begin, block_end] = range_of(block);
    scratch.resize(block_end - block_begin);
    read_at(data_.get(), scratch.data(), scratch.size(), l.extent.offset + block_begin, path_);
    check(block, scratch.data());
    const uint64_t from = std::max(block_begin, first), to = std::min(block_end, last);
    std::memcpy(destination + (from - first), scratch.data() + (from - block_begin), to - from);
  };
  if (inner_begin >= inner_end) {  // the slice lies within one block or two
    for (uint64_t block = first / l.block_bytes; block * l.block_bytes < last; ++block) read_partly(block);
    return;
  }
  if (first < inner_begin * l.block_bytes) read_partly(inner_begin - 1);
  if (last > std::min(inner_end * l.block_bytes, l.extent.bytes)) read_partly(inner_end);

  const uint64_t inner = inner_end - inner_begin;
  auto place = [&](uint64_t block) { return destination + (block * l.block_bytes - first); };
  auto bytes_of = [&](uint64_t from_block, uint64_t to_block) {
    return std::min(to_block * l.block_bytes, l.extent.bytes) - from_block * l.block_bytes;
  };
  const int threads = std::clamp(threads_, 1, kMaxReadThreads);
  if (cached_) {
    // From the page cache: the blocks are copied out of a mapping of the file and checksummed
    // in the same pass (crc32c_copy), a share of them per thread, each share mapped a window
    // of at most kReadWindowBytes at a time: a mapped page counts in the process's resident set
    // until it is unmapped (windows of 256 MiB put up to 16 × 256 MiB of file pages in a rank's
    // peak RSS, which no plan counted), and a mapping's page tables cost 0.2% of what it maps. A
    // window the kernel will not map, or whose pages fail under the copy (the file truncated,
    // a page evicted and then unreadable), is read again with pread, which names the failure.
    const uint64_t window_blocks = std::max<uint64_t>(1, kReadWindowBytes / l.block_bytes);
    const uint64_t shares = std::min<uint64_t>(static_cast<uint64_t>(threads), inner);
    std::vector<std::exception_ptr> errors(shares);
    auto share = [&](uint64_t k) {
      try {
        const uint64_t from = inner_begin + inner * k / shares, to = inner_begin + inner * (k + 1) / shares;
        std::vector<uint32_t> crcs(std::min(window_blocks, to - from));
        for (uint64_t first_block = from; first_block < to; first_block += window_blocks) {
          const uint64_t last_block = std::min(to, first_block + window_blocks);
          const auto mapping = MappedRange::map(data_.get(), l.extent.offset + first_block * l.block_bytes,
                                                bytes_of(first_block, last_block));
          const bool copied = mapping && copy_from_mapping([&] {
            for (uint64_t block = first_block; block < last_block; ++block) {
              crcs[block - first_block] = crc32c_copy(
                  place(block), mapping->data() + (block - first_block) * l.block_bytes, bytes_of(block, block + 1));
            }
          });
          for (uint64_t block = first_block; block < last_block; ++block) {
            if (copied) {
              verify(block, crcs[block - first_block]);
            } else {
              read_at(data_.get(), place(block), bytes_of(block, block + 1), l.extent.offset + block * l.block_bytes, path_);
              check(block, place(block));
            }
          }
        }
      } catch (...) {
        errors[k] = std::current_exception();
      }
    };
    std::vector<std::thread> helpers;
    for (uint64_t k = 1; k < shares; ++k) helpers.emplace_back(share, k);
    share(0);
    for (auto& helper : helpers) helper.join();
    for (const auto& error : errors) {
      if (error) std::rethrow_exception(error);
    }
    return;
  }
  // From the disk: blocks read in order, one sequential stream that the kernel's read-ahead
  // keeps ahead. Checking them in line would leave the disk idle for a
  // seventh of the time: a second thread checks each block once it is in place, whatever
  // the rank's core count (it mostly waits, as the reader does). Requests of several blocks:
  // with 4 MiB requests the stream ran 5% slower than with 16 MiB ones (medians of 5 rounds,
  // 2 ranks, cold cache, bench_checkpoint); a larger request leaves more of the last
  // request's check outside the overlap.
  constexpr uint64_t kBlocksPerRequest = 4;
  std::atomic<uint64_t> read_until{inner_begin};  // blocks before it are in place; kFailed: reading stopped
  constexpr uint64_t kFailed = UINT64_MAX;
  std::exception_ptr check_error;
  std::thread checker([&] {
    for (uint64_t block = inner_begin; block < inner_end; ++block) {
      uint64_t seen;
      while ((seen = read_until.load(std::memory_order_acquire)) <= block) read_until.wait(seen, std::memory_order_acquire);
      if (seen == kFailed) return;
      try {
        check(block, place(block));
      } catch (...) {
        check_error = std::current_exception();
        return;
      }
    }
  });
  try {
    for (uint64_t block = inner_begin; block < inner_end; block += kBlocksPerRequest) {
      const uint64_t end = std::min(inner_end, block + kBlocksPerRequest);
      read_at(data_.get(), place(block), bytes_of(block, end), l.extent.offset + block * l.block_bytes, path_);
      read_until.store(end, std::memory_order_release);
      read_until.notify_one();
    }
  } catch (...) {
    read_until.store(kFailed, std::memory_order_release);
    read_until.notify_one();
    checker.join();
    throw;
  }
  checker.join();
  if (check_error) std::rethrow_exception(check_error);
}

}  // namespace superoffload::io
