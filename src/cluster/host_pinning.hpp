// Page-locking ("pinning") host memory that a GPU copies to and from, with the CUDA runtime's
// cudaHostRegister. The offloaded optimizer pins its own buffers this way rather than through
// LibTorch's pinned allocator, which rounds every block up to a power of two: measured on an
// H200 node, a 1B model's optimizer buffers took 14.5 GiB of host memory for 9.4 GiB of state,
// and an 8B model's would not have fitted the node.
#pragma once

#include <cstddef>
#include <string>

namespace superoffload::cluster {

// Pins [data, data + bytes) (page-aligned) for device copies. False, with the reason in `why`,
// where it cannot be pinned (no CUDA in this build, no GPU, RLIMIT_MEMLOCK, no memory).
bool pin_host_range(void* data, size_t bytes, std::string& why);
// Undoes pin_host_range (before the memory is freed).
void unpin_host_range(void* data);

}  // namespace superoffload::cluster
