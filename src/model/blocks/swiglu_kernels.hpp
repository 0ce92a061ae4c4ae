// SwiGLU's elementwise work as one CUDA kernel each way (model/blocks/swiglu.cpp uses them on
// GPUs; compiled only on the CUDA path). Plain pointers and strides, no LibTorch types: the
// .cu file then compiles with nvcc in seconds.
//
// Operands are [rows, cols] with the columns contiguous and a row stride each (a half of a
// gate_up product is a view with the row stride 2 × cols). Values are computed in fp32 and
// rounded to the element type where LibTorch's chain `silu(gate) * up` and its autograd
// backward round: the results equal the chain's (tests/gpu/test_gpu_swiglu.cpp). Where every
// operand's rows start on 16 bytes and hold whole 16-byte packs, the kernels load and store in
// packs (the same arithmetic per element); otherwise element by element.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace superoffload::model::cuda {

enum class ElementType { f32, bf16, f16 };

struct Matrix {
  void* data = nullptr;
  int64_t row_stride = 0;  // in elements
};

// out = silu(gate) · up.
void swiglu_forward(ElementType type, int64_t rows, int64_t cols, Matrix gate, Matrix up, Matrix out,
                    cudaStream_t stream);

// d_up = d_out · silu(gate); d_gate = silu'(gate) · (d_out · up).
void swiglu_backward(ElementType type, int64_t rows, int64_t cols, Matrix d_out, Matrix gate, Matrix up,
                     Matrix d_gate, Matrix d_up, cudaStream_t stream);

}  // namespace superoffload::model::cuda
