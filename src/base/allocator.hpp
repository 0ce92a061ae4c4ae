// Host allocator settings for a process that allocates and frees layer-sized buffers.
#pragma once

namespace superoffload::base {

// glibc raises its mmap threshold dynamically after large frees, after which freed layer
// buffers stay in the heap instead of going back to the system, and a rank's memory keeps
// the high-water mark of every layer it ever held. A fixed threshold (4 MiB) makes large
// buffers mmap'ed and returned on free. Call once at start-up.
void configure_host_allocator();

}  // namespace superoffload::base
