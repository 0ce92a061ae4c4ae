// crc32c over ISA-L.
#include "io/crc32c.hpp"

#include <fcntl.h>
#include <isa-l/crc.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <memory>

#include "base/check_sys.hpp"
#include "base/error.hpp"

namespace superoffload::io {

uint32_t crc32c(const void* data, size_t size, uint32_t previous) {
  // ISA-L's crc32_iscsi neither inverts its seed nor its result, and takes an int length.
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t state = ~previous;
  while (size > 0) {
    const size_t piece = std::min<size_t>(size, size_t{1} << 30);
    state = crc32_iscsi(bytes, static_cast<int>(piece), state);
    bytes += piece;
    size -= piece;
  }
  return ~state;
}

uint32_t file_crc32c(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SO_CHECK_SYS(fd, "opening " << path.string());
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  // 4 MiB: large enough for few system calls, small enough to be checksummed from cache.
  constexpr size_t kBuffer = size_t{4} << 20;
  const std::unique_ptr<char[]> buffer(new char[kBuffer]);
  uint32_t crc = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buffer.get(), kBuffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      SO_CHECK_SYS(-1, "reading " << path.string());
    }
    if (n == 0) break;
    crc = crc32c(buffer.get(), static_cast<size_t>(n), crc);
  }
  ::close(fd);
  return crc;
}

}  // namespace superoffload::io
