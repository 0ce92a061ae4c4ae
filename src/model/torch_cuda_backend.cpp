// Loads libtorch_cuda.so before main where an NVIDIA driver is: see torch_cuda_backend.hpp.
#include "model/torch_cuda_backend.hpp"

#include <dlfcn.h>

#include <ATen/Context.h>

#include <cstdlib>

#include "base/build_config.hpp"
#include "base/error.hpp"

namespace superoffload::model {
namespace {

std::string dl_error() {
  const char* text = dlerror();
  return text ? text : "unknown dlopen error";
}

// libtorch_cuda.so beside the libtorch_cpu.so this process runs: the two must be the same
// build, and the directory is found wherever LibTorch lives (a venv, a bundle, an install).
std::string torch_cuda_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&at::globalContext), &info) != 0 && info.dli_fname != nullptr) {
    std::string cpu = info.dli_fname;
    const auto slash = cpu.rfind('/');
    if (slash != std::string::npos) return cpu.substr(0, slash + 1) + "libtorch_cuda.so";
  }
  return "libtorch_cuda.so";  // the search path's
}

TorchCudaBackend load() {
  TorchCudaBackend backend;
  backend.compiled = SUPEROFFLOAD_WITH_CUDA != 0;
  if (!backend.compiled) {
    backend.why_not = "this superoffload was built without the CUDA path (" SUPEROFFLOAD_CUDA_SUMMARY ")";
    return backend;
  }
  const char* mode_env = std::getenv("SUPEROFFLOAD_TORCH_CUDA");
  const std::string mode = mode_env && *mode_env ? mode_env : "auto";
  if (mode == "0") {
    backend.why_not = "SUPEROFFLOAD_TORCH_CUDA=0 keeps LibTorch's CUDA backend unloaded";
    return backend;
  }
  if (mode != "1" && mode != "auto") {
    backend.why_not = "SUPEROFFLOAD_TORCH_CUDA=" + mode + " is not one of auto, 1, 0";
    return backend;
  }
  // The driver's library: kept open, as LibTorch opens it anyway once CUDA is used.
  if (mode == "auto" && dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    backend.why_not = "no NVIDIA driver on this machine (libcuda.so.1 does not load: " + dl_error() + ")";
    return backend;
  }
  backend.path = torch_cuda_path();
  if (dlopen(backend.path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    backend.why_not = "LibTorch's CUDA backend " + backend.path + " does not load: " + dl_error();
    return backend;
  }
  backend.loaded = true;
  return backend;
}

// Before main, in every program that loads this library (the program, the tests, plugins'
// hosts), so that LibTorch's own CUDA checks answer as if it were linked.
[[maybe_unused]] const TorchCudaBackend& loaded_at_start = torch_cuda_backend();

}  // namespace

const TorchCudaBackend& torch_cuda_backend() {
  static const TorchCudaBackend backend = load();
  return backend;
}

void require_torch_cuda_backend(const std::string& what) {
  const TorchCudaBackend& backend = torch_cuda_backend();
  SO_CHECK(backend.loaded, what << " needs LibTorch's CUDA backend, which is not loaded: " << backend.why_not
                                << hint("run on a node with an NVIDIA GPU and driver (unset SUPEROFFLOAD_TORCH_CUDA, "
                                        "or set it to 1), or use [runtime] device = \"cpu\""));
}

}  // namespace superoffload::model
