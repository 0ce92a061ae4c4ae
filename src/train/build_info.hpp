// What this binary was built from and with, and the libraries it runs against.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace superoffload::train {

std::string project_version();  // "0.1.0"
std::string git_revision();     // "a1b2c3d", "a1b2c3d-dirty" or "unknown"
bool cuda_compiled();

std::string torch_version();       // LibTorch's TORCH_VERSION
bool torch_cxx11_abi();            // _GLIBCXX_USE_CXX11_ABI of this build (equal to LibTorch's)

// (component, version and details) lines for `superoffload version`, in display order.
std::vector<std::pair<std::string, std::string>> software_versions();

}  // namespace superoffload::train
