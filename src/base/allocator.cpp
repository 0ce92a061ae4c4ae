// Host allocator settings.
#include "base/allocator.hpp"

#include <malloc.h>

namespace superoffload::base {

void configure_host_allocator() {
  // Setting the threshold explicitly also turns glibc's dynamic adjustment off.
  mallopt(M_MMAP_THRESHOLD, 4 * 1024 * 1024);
}

}  // namespace superoffload::base
