// The CPU AdamW kernel: one pass over fp32 master weights, the two moments and the gradient
// that also writes the bf16 copy of the updated weights (round to nearest even). The moments
// are fp32, or bf16 with stochastic rounding ([offload] optimizer_state_dtype = "bf16": 22
// instead of 30 bytes per parameter). Besides the step, the two passes SuperOffload needs at
// step end: redo (a speculated step replaced by the clipped one, in one pass) and undo (a
// speculated step taken back when the step is skipped). SIMD through Google Highway with
// runtime dispatch (AVX2, AVX-512, NEON, SVE, …); a scalar reference with the same operation
// order gives bit-identical results on every target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace superoffload::optim {

struct AdamWStep {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  bool decoupled = true;  // AdamW; false: Adam with L2 (weight_decay·p added to the gradient)
  int64_t step = 1;       // this sub-group's step count after the update (1 on the first)
  // The gradient is multiplied by this (gradient clipping) in the register, never in memory.
  float grad_scale = 1.0f;
};

enum class AdamWPass {
  step,  // p, m, v ← AdamW(p, m, v, grad_scale·g)
  // p, m, v hold a step taken with the unscaled g (speculated): replace it by the step with
  // grad_scale·g (clipping), without going back through memory twice
  redo,
  undo,  // p, m, v hold a step taken with the unscaled g: restore the state before it
};

// Where the random bits of the stochastic rounding of bf16 moments come from: element i of a
// call draws hash(key, first_index + i). The bits depend on the element's position and the
// key only — not on threads or chunking — so a run is reproducible and resumable. Callers
// derive the key from the sub-group and the step (moment_rounding_key); each pass draws its
// own bits from it.
struct RoundingStream {
  uint32_t key = 0;
  uint64_t first_index = 0;
};
uint32_t moment_rounding_key(uint64_t sub_group_id, int64_t step);

// One pass over n elements in place. `bf16_out` (may be null) receives the bf16 copy of the
// new weights. Arrays need no particular alignment. `s.step` is the step being taken, redone
// or undone. Undo and redo are the algebraic inverse and replacement: exact up to fp32
// round-off with fp32 moments; with bf16 moments they add one stochastic rounding of the
// moments (the size of the one every step adds).
void adamw_pass(AdamWPass pass, const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq,
                const float* grad, uint16_t* bf16_out, size_t n);
void adamw_pass(AdamWPass pass, const AdamWStep& s, float* param, uint16_t* exp_avg, uint16_t* exp_avg_sq,
                const float* grad, uint16_t* bf16_out, size_t n, RoundingStream rounding);

// The same arithmetic, one element at a time: the references the SIMD passes must equal bit for bit.
void adamw_pass_scalar(AdamWPass pass, const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq,
                       const float* grad, uint16_t* bf16_out, size_t n);
void adamw_pass_scalar(AdamWPass pass, const AdamWStep& s, float* param, uint16_t* exp_avg, uint16_t* exp_avg_sq,
                       const float* grad, uint16_t* bf16_out, size_t n, RoundingStream rounding);

// The step (the common case).
inline void adamw_update(const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                         uint16_t* bf16_out, size_t n) {
  adamw_pass(AdamWPass::step, s, param, exp_avg, exp_avg_sq, grad, bf16_out, n);
}

// bf16 bits of x rounded stochastically with 16 random bits (NaN stays a quiet NaN).
uint16_t bf16_round_stochastic(float x, uint32_t random16);

// The instruction set the dispatcher picked on this machine ("AVX2", "AVX3", "NEON", "SVE", …).
std::string adamw_target();

}  // namespace superoffload::optim
