// The CPU AdamW kernel: one pass over fp32 master weights, exp_avg, exp_avg_sq and gradient
// that also writes the bf16 copy of the updated weights (round to nearest even). SIMD through
// Google Highway with runtime dispatch (AVX2, AVX-512, NEON, SVE, …); a scalar reference with
// the same operation order gives bit-identical results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace superoffload::optim {

struct AdamWStep {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  bool decoupled = true;  // AdamW; false: Adam with L2 (weight_decay·p added to the gradient)
  int64_t step = 1;       // this sub-group's step count after the update (1 on the first)
};

// Updates n elements in place. `bf16_out` may be null. Arrays need no particular alignment.
void adamw_update(const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                  uint16_t* bf16_out, size_t n);

// The same arithmetic, one element at a time: the reference the SIMD kernel must equal bit for bit.
void adamw_update_scalar(const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                         uint16_t* bf16_out, size_t n);

// The instruction set the dispatcher picked on this machine ("AVX2", "AVX3", "NEON", "SVE", …).
std::string adamw_target();

}  // namespace superoffload::optim
