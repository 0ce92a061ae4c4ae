// The CPU AdamW kernel: one pass over fp32 master weights, the two moments and the gradient
// that also writes the bf16 copy of the updated weights (round to nearest even). The moments
// are fp32, or bf16 with stochastic rounding ([offload] optimizer_state_dtype = "bf16": 20
// instead of 28 bytes per parameter). SIMD through Google Highway with runtime dispatch
// (AVX2, AVX-512, NEON, SVE, …); a scalar reference with the same operation order gives
// bit-identical results on every target.
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

// Where the random bits of the stochastic rounding of bf16 moments come from: element i of a
// call draws hash(key, first_index + i). The bits depend on the element's position and the
// key only — not on threads or chunking — so a run is reproducible and resumable. Callers
// derive the key from the sub-group and the step (moment_rounding_key).
struct RoundingStream {
  uint32_t key = 0;
  uint64_t first_index = 0;
};
uint32_t moment_rounding_key(uint64_t sub_group_id, int64_t step);

// Updates n elements in place. `bf16_out` may be null. Arrays need no particular alignment.
void adamw_update(const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                  uint16_t* bf16_out, size_t n);
// The same step with bf16 moments (read exactly, written with stochastic rounding).
void adamw_update_bf16_moments(const AdamWStep& s, float* param, uint16_t* exp_avg, uint16_t* exp_avg_sq,
                               const float* grad, uint16_t* bf16_out, size_t n, RoundingStream rounding);

// The same arithmetic, one element at a time: the references the SIMD kernels must equal bit for bit.
void adamw_update_scalar(const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                         uint16_t* bf16_out, size_t n);
void adamw_update_bf16_moments_scalar(const AdamWStep& s, float* param, uint16_t* exp_avg, uint16_t* exp_avg_sq,
                                      const float* grad, uint16_t* bf16_out, size_t n, RoundingStream rounding);

// The algebraic inverse of a step with the same gradient and hyper-parameters (`s.step` is
// the step being undone): weights first (their update used the new moments), then the
// moments. Exact up to fp32 round-off with fp32 moments; with bf16 moments the restored
// moments carry one more stochastic rounding (the size of the one every step adds).
void adamw_undo(const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad, size_t n);
void adamw_undo_bf16_moments(const AdamWStep& s, float* param, uint16_t* exp_avg, uint16_t* exp_avg_sq,
                             const float* grad, size_t n, RoundingStream rounding);

// bf16 bits of x rounded stochastically with 16 random bits (NaN stays a quiet NaN).
uint16_t bf16_round_stochastic(float x, uint32_t random16);

// The instruction set the dispatcher picked on this machine ("AVX2", "AVX3", "NEON", "SVE", …).
std::string adamw_target();

}  // namespace superoffload::optim
