// SwiGLU as the Llama, Mistral, Qwen and Phi3 families define it, down(silu(gate(x)) · up(x)),
// with gate and up computed by one matrix product where their weights allow (Phi3's fused
// gate_up_proj always; separate gate_proj/up_proj on request when ZeRO-3's gathered buffer holds
// them back to back, model/blocks/stacked_weights.hpp), and the activation then as one autograd
// node over the product's [.., 2 · intermediate] output. On a GPU the activation and its
// gradients are one CUDA kernel each way (model/blocks/swiglu_kernels.hpp) instead of autograd's
// chain of five elementwise kernels over [tokens, intermediate] tensors (silu, two multiplies,
// silu's backward, and silu again), which were about 12% of a 1.65B step's kernel time on an
// H100; SUPEROFFLOAD_SWIGLU_KERNEL=never keeps the chain there too (for comparisons).
#pragma once

#include <torch/nn/module.h>

#include "model/blocks/linear.hpp"

namespace superoffload::model {

// silu(gate) · up for `gate_up` [.., 2 · intermediate], gate first (HF's Phi3 order). Equal, bit
// for bit, to at::silu(gate) * up in forward and in both gradients; but it keeps only its input
// for backward (autograd's chain keeps gate, silu(gate) and up) and writes the gradient of gate
// and up into one tensor, so the product's input gradient is one GEMM with no concatenation.
at::Tensor swiglu(const at::Tensor& gate_up);

// silu(gate) · up for separate gate and up (of one shape): on a GPU through the kernels (saving
// gate and up for backward, not silu(gate) too), elsewhere autograd's chain itself.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

struct SwigluMlpOptions {
  int64_t hidden = 0, intermediate = 0;
  bool bias = false;
  bool fused = false;  // Phi3: one gate_up_proj [2 · intermediate, hidden]
};

// Module names are HF's: gate_proj, up_proj | gate_up_proj, down_proj.
class SwigluMlp : public torch::nn::Module {
 public:
  explicit SwigluMlp(const SwigluMlpOptions& options);
  at::Tensor forward(const at::Tensor& x) const;

  std::shared_ptr<Linear> gate_proj, up_proj, gate_up_proj, down_proj;
};

}  // namespace superoffload::model
