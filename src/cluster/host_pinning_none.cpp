// Host pinning in a build without CUDA: nothing can be pinned.
#include "cluster/host_pinning.hpp"

namespace superoffload::cluster {

bool pin_host_range(void*, size_t, std::string& why) {
  why = "this build has no CUDA";
  return false;
}

void unpin_host_range(void*) {}

}  // namespace superoffload::cluster
