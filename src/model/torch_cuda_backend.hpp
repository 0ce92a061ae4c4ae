// LibTorch's CUDA backend (libtorch_cuda.so), loaded at start only where an NVIDIA driver is.
//
// LibTorch's CMake package links libtorch_cuda.so into every program with --no-as-needed,
// though nothing calls it by name: its static initialisers register the CUDA kernels and
// hooks. Loading and initialising it took about 0.45 s of the ~1.5 s every process of ours
// needed to start on a CPU-only machine (a login node, CI, `plan`, `inspect`, each rank of a
// CPU run), and 313 MiB of its resident set, where it can do nothing. superoffload links
// LibTorch's CPU libraries only, and this library (which every program and plugin of ours
// loads) opens libtorch_cuda.so from the directory of the loaded libtorch_cpu.so before main,
// when libcuda.so.1 (the driver) loads.
// So a program on a GPU node has the backend as before; torch::cuda::is_available() is
// answered as before.
//
// SUPEROFFLOAD_TORCH_CUDA: "auto" (default: when the driver loads), "1" (always; for a check
// of the loading itself), "0" (never: a CPU-only run on a GPU node).
#pragma once

#include <string>

namespace superoffload::model {

struct TorchCudaBackend {
  bool compiled = false;  // the CUDA path is compiled in
  bool loaded = false;    // libtorch_cuda.so is loaded (CUDA tensors can be made)
  std::string path;       // the libtorch_cuda.so opened, when it was tried
  std::string why_not;    // when not loaded: the reason, for the user
};

// What the start-up load did (it runs once, before main; a call later returns the same).
const TorchCudaBackend& torch_cuda_backend();

// Throws an error naming why the backend is missing, for a device that needs it
// (`what`, e.g. "[runtime] device = \"cuda\"").
void require_torch_cuda_backend(const std::string& what);

}  // namespace superoffload::model
