// populate_for_write.
#include "base/fresh_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "base/parallel_ranges.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; glibc headers older than the running kernel lack it
#endif

namespace superoffload::base {

bool populate_for_write(void* data, size_t bytes) {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end <= begin) return true;  // no whole page: the writes fault in the at most two there are
  return ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
}

void for_each_page_chunk(void* data, size_t bytes, int threads, const std::function<void(char* chunk, size_t bytes)>& fn) {
  constexpr uintptr_t kChunk = uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<uintptr_t>(data), end = begin + bytes;
  if (end <= begin) return;
  const uintptr_t first = begin / kChunk * kChunk;
  const auto chunks = static_cast<int64_t>((end - first + kChunk - 1) / kChunk);
  parallel_ranges(chunks, threads_for(chunks, 4, threads), [&](int64_t from_chunk, int64_t to_chunk) {
    for (int64_t c = from_chunk; c < to_chunk; ++c) {
      const uintptr_t from = std::max(begin, first + static_cast<uintptr_t>(c) * kChunk);
      const uintptr_t to = std::min(end, first + static_cast<uintptr_t>(c + 1) * kChunk);
      fn(reinterpret_cast<char*>(from), to - from);
    }
  });
}

}  // namespace superoffload::base
