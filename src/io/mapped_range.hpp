// Reading a file's page cache in place: a read-only mapping of part of a file, and a way to
// copy from it that survives the file failing under it.
//
// Why: a checked read from the page cache through read(2) is two passes, the kernel's copy
// and then the CRC over the copy. From a mapping, crc32c_copy checksums and copies in one
// pass, which brings a checked read to the speed of a plain one (#17). Mapping costs about a
// tenth of the copy (large folios are mapped many pages per fault), so it pays only where the
// data is already cached; reads from the drive stay with pread and the kernel's read-ahead.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>

namespace superoffload::io {

class MappedRange {
 public:
  // Bytes [offset, offset + bytes) of the open file `fd`, or nothing if the kernel refuses
  // the mapping (the caller then reads with pread).
  static std::optional<MappedRange> map(int fd, uint64_t offset, uint64_t bytes);
  ~MappedRange();
  MappedRange(MappedRange&& other) noexcept;
  MappedRange& operator=(MappedRange&&) = delete;
  MappedRange(const MappedRange&) = delete;
  MappedRange& operator=(const MappedRange&) = delete;

  const char* data() const { return base_ + lead_; }  // the byte at `offset`

 private:
  MappedRange(char* base, uint64_t lead, uint64_t length) : base_(base), lead_(lead), length_(length) {}
  char* base_ = nullptr;  // page-aligned start of the mapping
  uint64_t lead_ = 0;     // bytes between it and `offset`
  uint64_t length_ = 0;
};

// Runs `copy`, which reads from mappings, and returns false if a page it touched could not
// be read: the file was truncated under the mapping, or the drive failed to read a page that
// had left the cache. The kernel reports both with SIGBUS, which would otherwise end the
// process; here it ends only `copy`, and the caller reads the same bytes with pread, which
// reports the failure as an error naming the file. `copy` must not allocate, take locks or
// own anything that needs destroying: it is left by siglongjmp.
bool copy_from_mapping(const std::function<void()>& copy);

}  // namespace superoffload::io
