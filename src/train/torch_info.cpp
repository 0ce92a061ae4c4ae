// LibTorch version facts; only the tiny version header is included.
#include <torch/version.h>

#include "train/build_info.hpp"

namespace superoffload::train {

std::string torch_version() { return TORCH_VERSION; }

bool torch_cxx11_abi() {
#if defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI
  return true;
#else
  return false;
#endif
}

}  // namespace superoffload::train
