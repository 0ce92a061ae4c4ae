// Host allocator settings.
#include "base/allocator.hpp"

#include <malloc.h>

namespace superoffload::base {

void configure_host_allocator() {
  // Setting the threshold explicitly also turns glibc's dynamic adjustment off.
  mallopt(M_MMAP_THRESHOLD, 4 * 1024 * 1024);
  // Not set: LibTorch's THP_MEM_ALLOC_ENABLE (transparent huge pages for its buffers of 2 MiB and
  // more). First touch of a fresh buffer ran 2.4-6x faster with huge pages on a Sapphire Rapids
  // VM, but a 0.55B's whole start-up did not: the optimizer state's set-up took 1.8-2.5 s
  // instead of 0.5-0.7 s and steps 2-5 % longer (three interleaved runs each, 2026-11-28);
  // the kernel's compaction for each huge page costs more than the faults it saves.
}

}  // namespace superoffload::base
