// SwiGLU kernels (see swiglu_kernels.hpp).
#include "model/blocks/swiglu_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace superoffload::model::cuda {
namespace {

// Conversions with round-to-nearest-even, as LibTorch's BFloat16 and Half.
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
template <typename T>
__device__ __forceinline__ T narrow(float x);
template <>
__device__ __forceinline__ float narrow<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half narrow<__half>(float x) { return __float2half_rn(x); }

// LibTorch's silu: x / (1 + exp(-x)) in fp32.
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// Rows over the grid's y (striding past 65,535 rows), columns over x: no index division, which
// in 64 bits would cost more than the memory traffic these kernels are bound by.
#define SO_FOR_EACH_ELEMENT(rows, cols)                                                     \
  for (int64_t r = blockIdx.y; r < (rows); r += gridDim.y)                                  \
    for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < (cols); \
         c += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Rounded to T after each operation of the chain: silu(gate) → s, s · up → out.
template <typename T>
__global__ void forward_kernel(int64_t rows, int64_t cols, const T* gate, int64_t gate_stride, const T* up,
                               int64_t up_stride, T* out, int64_t out_stride) {
  SO_FOR_EACH_ELEMENT(rows, cols) {
    const float s = widen(narrow<T>(silu(widen(gate[r * gate_stride + c]))));
    out[r * out_stride + c] = narrow<T>(s * widen(up[r * up_stride + c]));
  }
}

// The chain's backward: mul's two gradients (d_out · s and d_out · up, each rounded to T), then
// silu_backward on the latter: dy · σ · (1 + x · (1 − σ)) in fp32.
template <typename T>
__global__ void backward_kernel(int64_t rows, int64_t cols, const T* d_out, int64_t d_out_stride, const T* gate,
                                int64_t gate_stride, const T* up, int64_t up_stride, T* d_gate, int64_t d_gate_stride,
                                T* d_up, int64_t d_up_stride) {
  SO_FOR_EACH_ELEMENT(rows, cols) {
    const float x = widen(gate[r * gate_stride + c]);
    const float g = widen(d_out[r * d_out_stride + c]);
    const float s = widen(narrow<T>(silu(x)));
    d_up[r * d_up_stride + c] = narrow<T>(g * s);
    const float dy = widen(narrow<T>(g * widen(up[r * up_stride + c])));
    const float sigmoid = 1.0f / (1.0f + expf(-x));
    d_gate[r * d_gate_stride + c] = narrow<T>(dy * sigmoid * (1.0f + x * (1.0f - sigmoid)));
  }
}

// The same work with 16-byte loads and stores (8 bf16 or fp16 elements, 4 fp32), where every
// operand allows them: scalar 2-byte accesses left these memory-bound kernels short of the
// bandwidth a vector access reaches. Each element's arithmetic is the scalar kernels', so the
// results are the same bits.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

template <typename T>
__device__ __forceinline__ Pack<T> load(const T* base, int64_t r, int64_t stride, int64_t c) {
  return *reinterpret_cast<const Pack<T>*>(base + r * stride + c * Pack<T>::kSize);
}

template <typename T>
__device__ __forceinline__ void store(T* base, int64_t r, int64_t stride, int64_t c, const Pack<T>& p) {
  *reinterpret_cast<Pack<T>*>(base + r * stride + c * Pack<T>::kSize) = p;
}

// `packs` columns of Pack<T>::kSize elements each.
template <typename T>
__global__ void forward_kernel_packed(int64_t rows, int64_t packs, const T* gate, int64_t gate_stride, const T* up,
                                      int64_t up_stride, T* out, int64_t out_stride) {
  SO_FOR_EACH_ELEMENT(rows, packs) {
    const Pack<T> g = load(gate, r, gate_stride, c), u = load(up, r, up_stride, c);
    Pack<T> o;
#pragma unroll
    for (int i = 0; i < Pack<T>::kSize; ++i) {
      const float s = widen(narrow<T>(silu(widen(g.v[i]))));
      o.v[i] = narrow<T>(s * widen(u.v[i]));
    }
    store(out, r, out_stride, c, o);
  }
}

template <typename T>
__global__ void backward_kernel_packed(int64_t rows, int64_t packs, const T* d_out, int64_t d_out_stride,
                                       const T* gate, int64_t gate_stride, const T* up, int64_t up_stride, T* d_gate,
                                       int64_t d_gate_stride, T* d_up, int64_t d_up_stride) {
  SO_FOR_EACH_ELEMENT(rows, packs) {
    const Pack<T> xs = load(gate, r, gate_stride, c), gs = load(d_out, r, d_out_stride, c),
                  us = load(up, r, up_stride, c);
    Pack<T> dg, du;
#pragma unroll
    for (int i = 0; i < Pack<T>::kSize; ++i) {
      const float x = widen(xs.v[i]);
      const float g = widen(gs.v[i]);
      const float s = widen(narrow<T>(silu(x)));
      du.v[i] = narrow<T>(g * s);
      const float dy = widen(narrow<T>(g * widen(us.v[i])));
      const float sigmoid = 1.0f / (1.0f + expf(-x));
      dg.v[i] = narrow<T>(dy * sigmoid * (1.0f + x * (1.0f - sigmoid)));
    }
    store(d_up, r, d_up_stride, c, du);
    store(d_gate, r, d_gate_stride, c, dg);
  }
}

#undef SO_FOR_EACH_ELEMENT

constexpr unsigned kThreads = 256;

// Whether every operand can be read and written in Pack<T>s: the columns a whole number of
// packs, and each row's start 16-byte aligned (base and row stride).
template <typename T>
bool packable(int64_t cols, std::initializer_list<Matrix> operands) {
  constexpr int64_t kSize = Pack<T>::kSize;
  if (cols % kSize != 0) return false;
  for (const auto& m : operands) {
    if (reinterpret_cast<uintptr_t>(m.data) % sizeof(Pack<T>) != 0 || m.row_stride % kSize != 0) return false;
  }
  return true;
}

// Blocks across a row's columns, and one row of blocks per row up to the grid's limit.
dim3 grid_for(int64_t rows, int64_t cols) {
  const int64_t across = std::min<int64_t>(65535, (cols + kThreads - 1) / kThreads);
  return dim3(static_cast<unsigned>(across), static_cast<unsigned>(std::min<int64_t>(65535, rows)));
}

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::string text = std::string(what) + ": " + cudaGetErrorString(status);
  if (status == cudaErrorNoKernelImageForDevice) {
    text += " (superoffload's kernels were built for the GPU architectures " SUPEROFFLOAD_CUDA_ARCHITECTURES_TEXT
            "; configure with -DSUPEROFFLOAD_CUDA_ARCHITECTURES=<this GPU's, e.g. 100> and rebuild, or set "
            "SUPEROFFLOAD_SWIGLU_KERNEL=never)";
  }
  throw std::runtime_error(text);
}

template <typename T>
void forward_as(int64_t rows, int64_t cols, Matrix gate, Matrix up, Matrix out, cudaStream_t stream) {
  if (packable<T>(cols, {gate, up, out})) {
    const int64_t packs = cols / Pack<T>::kSize;
    forward_kernel_packed<T><<<grid_for(rows, packs), kThreads, 0, stream>>>(
        rows, packs, static_cast<const T*>(gate.data), gate.row_stride, static_cast<const T*>(up.data), up.row_stride,
        static_cast<T*>(out.data), out.row_stride);
    check(cudaGetLastError(), "launching the SwiGLU forward kernel");
    return;
  }
  forward_kernel<T><<<grid_for(rows, cols), kThreads, 0, stream>>>(
      rows, cols, static_cast<const T*>(gate.data), gate.row_stride, static_cast<const T*>(up.data), up.row_stride,
      static_cast<T*>(out.data), out.row_stride);
  check(cudaGetLastError(), "launching the SwiGLU forward kernel");
}

template <typename T>
void backward_as(int64_t rows, int64_t cols, Matrix d_out, Matrix gate, Matrix up, Matrix d_gate, Matrix d_up,
                 cudaStream_t stream) {
  if (packable<T>(cols, {d_out, gate, up, d_gate, d_up})) {
    const int64_t packs = cols / Pack<T>::kSize;
    backward_kernel_packed<T><<<grid_for(rows, packs), kThreads, 0, stream>>>(
        rows, packs, static_cast<const T*>(d_out.data), d_out.row_stride, static_cast<const T*>(gate.data),
        gate.row_stride, static_cast<const T*>(up.data), up.row_stride, static_cast<T*>(d_gate.data),
        d_gate.row_stride, static_cast<T*>(d_up.data), d_up.row_stride);
    check(cudaGetLastError(), "launching the SwiGLU backward kernel");
    return;
  }
  backward_kernel<T><<<grid_for(rows, cols), kThreads, 0, stream>>>(
      rows, cols, static_cast<const T*>(d_out.data), d_out.row_stride, static_cast<const T*>(gate.data),
      gate.row_stride, static_cast<const T*>(up.data), up.row_stride, static_cast<T*>(d_gate.data), d_gate.row_stride,
      static_cast<T*>(d_up.data), d_up.row_stride);
  check(cudaGetLastError(), "launching the SwiGLU backward kernel");
}

}  // namespace

void swiglu_forward(ElementType type, int64_t rows, int64_t cols, Matrix gate, Matrix up, Matrix out,
                    cudaStream_t stream) {
  if (rows * cols == 0) return;
  switch (type) {
    case ElementType::f32: return forward_as<float>(rows, cols, gate, up, out, stream);
    case ElementType::bf16: return forward_as<__nv_bfloat16>(rows, cols, gate, up, out, stream);
    case ElementType::f16: return forward_as<__half>(rows, cols, gate, up, out, stream);
  }
}

void swiglu_backward(ElementType type, int64_t rows, int64_t cols, Matrix d_out, Matrix gate, Matrix up,
                     Matrix d_gate, Matrix d_up, cudaStream_t stream) {
  if (rows * cols == 0) return;
  switch (type) {
    case ElementType::f32: return backward_as<float>(rows, cols, d_out, gate, up, d_gate, d_up, stream);
    case ElementType::bf16: return backward_as<__nv_bfloat16>(rows, cols, d_out, gate, up, d_gate, d_up, stream);
    case ElementType::f16: return backward_as<__half>(rows, cols, d_out, gate, up, d_gate, d_up, stream);
  }
}

}  // namespace superoffload::model::cuda
