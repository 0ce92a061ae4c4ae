// A test-only LD_PRELOAD library (tests/gpu/test_copy_lag.sh): every device-to-host
// cudaMemcpyAsync is preceded, on its own stream, by a host function that sleeps
// SO_D2H_LAG_MS milliseconds. The copy then lands that much later than it would, while the
// CPU goes on: a reader of the host buffer that does not wait for the copy's event reads a
// gradient that is not there yet, and the run's losses leave the unlagged run's.
// SO_LAG_H2D=1 lags host-to-device copies the same way (activation checkpoints coming back
// from host memory: a recompute that did not wait for its input would read garbage).
//
// LibTorch calls the CUDA runtime through its shared library, so the symbol interposes; no
// CUDA library is linked here (the real functions are looked up in the process).
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

using MemcpyAsync = cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);
using LaunchHostFunc = cudaError_t (*)(cudaStream_t, cudaHostFn_t, void*);

std::atomic<long> lagged{0};
int lag_ms() {
  static const int ms = [] {
    const char* v = std::getenv("SO_D2H_LAG_MS");
    return v ? std::atoi(v) : 20;
  }();
  return ms;
}
void sleep_on_stream(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(lag_ms())); }

struct Report {
  ~Report() { std::fprintf(stderr, "d2h_lag: %ld device-to-host copies delayed by %d ms\n", lagged.load(), lag_ms()); }
} report;

}  // namespace

extern "C" cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                       cudaStream_t stream) {
  static const auto real = reinterpret_cast<MemcpyAsync>(dlsym(RTLD_NEXT, "cudaMemcpyAsync"));
  static const auto host_func = reinterpret_cast<LaunchHostFunc>(dlsym(RTLD_DEFAULT, "cudaLaunchHostFunc"));
  if (real == nullptr || host_func == nullptr) {
    std::fprintf(stderr, "d2h_lag: the CUDA runtime's cudaMemcpyAsync/cudaLaunchHostFunc not found\n");
    std::abort();
  }
  static const bool h2d_too = [] {
    const char* v = std::getenv("SO_LAG_H2D");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  if (kind == cudaMemcpyDeviceToHost || (h2d_too && kind == cudaMemcpyHostToDevice)) {
    const cudaError_t queued = host_func(stream, sleep_on_stream, nullptr);
    if (queued != cudaSuccess) return queued;
    ++lagged;
  }
  return real(dst, src, count, kind, stream);
}
