// SwiGLU as the Llama, Mistral, Qwen and Phi3 families define it, down(silu(gate(x)) · up(x)),
// with gate and up computed by one matrix product where their weights allow (Phi3's fused
// gate_up_proj always; separate gate_proj/up_proj on request when ZeRO-3's gathered buffer holds
// them back to back, model/blocks/stacked_weights.hpp), and the activation then as one autograd
// node over the product's [.., 2 · intermediate] output.
#pragma once

#include <torch/nn/module.h>

#include "model/blocks/linear.hpp"

namespace superoffload::model {

// silu(gate) · up for `gate_up` [.., 2 · intermediate], gate first (HF's Phi3 order). Equal, bit
// for bit, to at::silu(gate) * up in forward and in both gradients; but it keeps only its input
// for backward (autograd's chain keeps gate, silu(gate) and up) and writes the gradient of gate
// and up into one tensor, so the product's input gradient is one GEMM with no concatenation.
at::Tensor swiglu(const at::Tensor& gate_up);

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
