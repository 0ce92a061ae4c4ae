// LibTorch's CUDA backend is opened at start as SUPEROFFLOAD_TORCH_CUDA asks
// (src/model/torch_cuda_backend.hpp). CTest runs this binary once per setting
// (torch_cuda_backend_{auto,forced,off,invalid}); each run checks what its setting must give.
// "forced" is the check that the library opened by path really is LibTorch's CUDA backend: its
// hooks answer where the CPU-only default would throw, on a machine without a GPU too.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <cstdlib>
#include <string>

#include "base/build_config.hpp"
#include "base/error.hpp"
#include "model/torch_cuda_backend.hpp"

namespace m = superoffload::model;

namespace {

std::string setting() {
  const char* value = std::getenv("SUPEROFFLOAD_TORCH_CUDA");
  return value && *value ? value : "auto";
}

// Whether LibTorch's CUDA hooks are registered: the CPU-only default refuses this query.
bool cuda_hooks_registered() {
  try {
    return at::detail::getCUDAHooks().versionCUDART() > 0;
  } catch (const std::exception&) {
    return false;
  }
}

void expect_refused_for_a_device(const std::string& reason) {
  try {
    m::require_torch_cuda_backend("[runtime] device = \"cuda\"");
    FAIL() << "a CUDA device was allowed without the backend";
  } catch (const superoffload::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[runtime] device = \"cuda\" needs LibTorch's CUDA backend"), std::string::npos) << what;
    EXPECT_NE(what.find(reason), std::string::npos) << what;
  }
}

}  // namespace

TEST(TorchCudaBackend, OpenedAsTheSettingAsks) {
  const m::TorchCudaBackend& backend = m::torch_cuda_backend();
  EXPECT_EQ(&backend, &m::torch_cuda_backend()) << "loaded once, at start";
  std::printf("SUPEROFFLOAD_TORCH_CUDA=%s: %s %s\n", setting().c_str(), backend.loaded ? "loaded" : "not loaded:",
              backend.loaded ? backend.path.c_str() : backend.why_not.c_str());
  if (!SUPEROFFLOAD_WITH_CUDA) {
    EXPECT_FALSE(backend.compiled);
    EXPECT_FALSE(backend.loaded);
    EXPECT_NE(backend.why_not.find("without the CUDA path"), std::string::npos) << backend.why_not;
    expect_refused_for_a_device("without the CUDA path");
    return;
  }
  EXPECT_TRUE(backend.compiled);
  const std::string mode = setting();
  if (mode == "1") {
    ASSERT_TRUE(backend.loaded) << backend.why_not;
    EXPECT_NE(backend.path.find("libtorch_cuda.so"), std::string::npos) << backend.path;
    EXPECT_TRUE(cuda_hooks_registered()) << "libtorch_cuda.so was opened but LibTorch's CUDA hooks are not registered";
    EXPECT_NO_THROW(m::require_torch_cuda_backend("[runtime] device = \"cuda\""));
  } else if (mode == "0") {
    EXPECT_FALSE(backend.loaded);
    EXPECT_FALSE(cuda_hooks_registered()) << "the backend was kept out, yet its hooks answer";
    EXPECT_FALSE(at::hasCUDA());
    expect_refused_for_a_device("SUPEROFFLOAD_TORCH_CUDA=0");
  } else if (mode == "auto") {
    // Open where the driver is: the test asks the dynamic loader the same question.
    const bool driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != nullptr ||
                        dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) != nullptr;
    EXPECT_EQ(backend.loaded, driver) << backend.why_not;
    EXPECT_EQ(cuda_hooks_registered(), driver);
    if (!driver) {
      EXPECT_NE(backend.why_not.find("libcuda.so.1"), std::string::npos) << backend.why_not;
      expect_refused_for_a_device("no NVIDIA driver");
    }
  } else {
    EXPECT_FALSE(backend.loaded);
    EXPECT_NE(backend.why_not.find("SUPEROFFLOAD_TORCH_CUDA=" + mode + " is not one of auto, 1, 0"), std::string::npos)
        << backend.why_not;
    expect_refused_for_a_device("is not one of auto, 1, 0");
  }
}
