// CPU AdamW: Highway kernels (compiled once per target, chosen at run time) and their scalar
// twins. Operation order per element (identical in both; this file is built without FMA
// contraction, so every product and sum is rounded where it is written):
//   decoupled: p = p · (1 − lr·wd)            L2: g = g + wd·p
//   m = β1·m + (1 − β1)·g
//   v = β2·v + ((1 − β2)·g)·g
//   p = p − (lr / bc1) · (m / (sqrt(v) · (1 / sqrt(bc2)) + ε))        bc_i = 1 − β_i^step
//   bf16 copy = round_to_nearest_even(p)
//   bf16 moments: stored as stochastic_round(m), stochastic_round(v)
// One division and one square root per element: on CPUs where the kernel is not at the
// memory bound (one core, or many cores per memory channel's worth of bandwidth) the
// divider is the busiest unit, and the bias-correction division was a second trip through it.
// The bf16 stores convert two vectors at once: each rounded value sits in the upper half of
// a 32-bit lane, so one ConcatOdd (a pack and a permute on AVX2) narrows both.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optim/cpu_adamw.cpp"
#include <hwy/foreach_target.h>  // NOLINT: re-includes this file once per target
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "comm/bf16.hpp"
#include "optim/cpu_adamw.hpp"

#ifndef SUPEROFFLOAD_ADAMW_CONSTANTS
#define SUPEROFFLOAD_ADAMW_CONSTANTS
namespace superoffload::optim {
// Scalars derived once per call, in float as the per-element arithmetic uses them.
struct Derived {
  float decay_factor, l2, one_minus_beta1, one_minus_beta2, step_size, inv_bc2_sqrt;
};
inline Derived derive(const AdamWStep& s) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  return {s.decoupled ? 1.0f - s.lr * s.weight_decay : 1.0f, s.decoupled ? 0.0f : s.weight_decay, 1.0f - s.beta1,
          1.0f - s.beta2, static_cast<float>(static_cast<double>(s.lr) / bc1), static_cast<float>(1.0 / std::sqrt(bc2))};
}
// A 32-bit integer hash with full avalanche (Wellons' "lowbias32" constants): the random bits of
// element `index`. Two multiplies and three shifts: cheap next to a square root and a division.
inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
inline uint32_t random_bits(uint32_t key, uint64_t index) { return mix32(static_cast<uint32_t>(index) + key); }
// The undo draws its own bits, so that undo and redo do not round the same way.
constexpr uint32_t kUndoKey = 0x5bd1e995u;
}  // namespace superoffload::optim
#endif

HWY_BEFORE_NAMESPACE();
namespace superoffload::optim::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU32 = hn::RebindToUnsigned<DF>;
using DU16 = hn::Repartition<uint16_t, DF>;  // twice the lanes: two float vectors narrowed at once
using VF = hn::Vec<DF>;
using VU32 = hn::Vec<DU32>;

// 32-bit lanes whose upper halves are the bf16 results: nearest-even, NaN kept quiet.
HWY_INLINE VU32 nearest_even_bits(VF x) {
  const DU32 du;
  const auto bits = hn::BitCast(du, x);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto sum = hn::Add(bits, hn::Add(hn::Set(du, 0x7fffu), lsb));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(x)), hn::Or(bits, hn::Set(du, 0x00400000u)), sum);
}
// The same, rounded stochastically with the low 16 bits of `random`.
HWY_INLINE VU32 stochastic_bits(VF x, VU32 random) {
  const DU32 du;
  const auto bits = hn::BitCast(du, x);
  const auto sum = hn::Add(bits, hn::And(random, hn::Set(du, 0xffffu)));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(x)), hn::Or(bits, hn::Set(du, 0x00400000u)), sum);
}
// Stores the upper halves of two vectors of 32-bit lanes as 2·L bf16 values.
HWY_INLINE void store_upper_halves(VU32 lo, VU32 hi, uint16_t* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR  // one lane: nothing to concatenate
  out[0] = static_cast<uint16_t>(hn::GetLane(lo) >> 16);
  out[1] = static_cast<uint16_t>(hn::GetLane(hi) >> 16);
#else
  const DU16 d16;
  hn::StoreU(hn::ConcatOdd(d16, hn::BitCast(d16, hi), hn::BitCast(d16, lo)), d16, out);
#endif
}
// `counter` holds key + index of each lane (Iota, built outside the loop: on x86 it goes
// through memory and stalls the store forwarding).
HWY_INLINE VU32 random_vector(VU32 counter) {
  const DU32 du;
  auto x = counter;
  x = hn::Xor(x, hn::ShiftRight<16>(x));
  x = hn::Mul(x, hn::Set(du, 0x7feb352du));
  x = hn::Xor(x, hn::ShiftRight<15>(x));
  x = hn::Mul(x, hn::Set(du, 0x846ca68bu));
  return hn::Xor(x, hn::ShiftRight<16>(x));
}

HWY_INLINE VF load_moment(const float* HWY_RESTRICT from) { return hn::LoadU(DF(), from); }
HWY_INLINE VF load_moment(const uint16_t* HWY_RESTRICT from) {
  const hn::Rebind<uint16_t, DF> d16;
  return hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(DU32(), hn::LoadU(d16, from))));
}

struct Constants {
  VF decay, l2, beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, inv_bc2_sqrt, eps;
};

// One vector of the step: returns the new weights, moments through m and v.
HWY_INLINE VF step_vector(const AdamWStep& s, const Constants& c, VF p, VF g, VF& m, VF& v) {
  if (s.decoupled) {
    p = hn::Mul(p, c.decay);
  } else {
    g = hn::Add(g, hn::Mul(c.l2, p));
  }
  m = hn::Add(hn::Mul(c.beta1, m), hn::Mul(c.one_minus_beta1, g));
  v = hn::Add(hn::Mul(c.beta2, v), hn::Mul(hn::Mul(c.one_minus_beta2, g), g));
  const auto denom = hn::Add(hn::Mul(hn::Sqrt(v), c.inv_bc2_sqrt), c.eps);
  return hn::Sub(p, hn::Mul(c.step_size, hn::Div(m, denom)));
}

// Moment is float (fp32 moments) or uint16_t (bf16 moments, stochastic rounding).
template <typename Moment>
HWY_INLINE void UpdateImpl(const AdamWStep& s, float* HWY_RESTRICT param, Moment* HWY_RESTRICT exp_avg,
                           Moment* HWY_RESTRICT exp_avg_sq, const float* HWY_RESTRICT grad,
                           uint16_t* HWY_RESTRICT bf16_out, size_t n, RoundingStream rounding) {
  const DF df;
  const size_t lanes = hn::Lanes(df);
  const Derived k = derive(s);
  const Constants c{hn::Set(df, k.decay_factor),    hn::Set(df, k.l2),        hn::Set(df, s.beta1),
                    hn::Set(df, s.beta2),           hn::Set(df, k.one_minus_beta1), hn::Set(df, k.one_minus_beta2),
                    hn::Set(df, k.step_size),       hn::Set(df, k.inv_bc2_sqrt),   hn::Set(df, s.eps)};
  const DU32 du;
  // key + element index per lane, advanced by two vectors per iteration (wraps modulo 2^32,
  // as the scalar twin's does)
  auto counter = hn::Add(hn::Iota(du, 0u), hn::Set(du, rounding.key + static_cast<uint32_t>(rounding.first_index)));
  const auto advance = hn::Set(du, static_cast<uint32_t>(lanes));
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    VF m0 = load_moment(exp_avg + i), v0 = load_moment(exp_avg_sq + i);
    VF m1 = load_moment(exp_avg + i + lanes), v1 = load_moment(exp_avg_sq + i + lanes);
    const VF p0 = step_vector(s, c, hn::LoadU(df, param + i), hn::LoadU(df, grad + i), m0, v0);
    const VF p1 = step_vector(s, c, hn::LoadU(df, param + i + lanes), hn::LoadU(df, grad + i + lanes), m1, v1);
    hn::StoreU(p0, df, param + i);
    hn::StoreU(p1, df, param + i + lanes);
    if constexpr (sizeof(Moment) == sizeof(float)) {
      hn::StoreU(m0, df, exp_avg + i);
      hn::StoreU(m1, df, exp_avg + i + lanes);
      hn::StoreU(v0, df, exp_avg_sq + i);
      hn::StoreU(v1, df, exp_avg_sq + i + lanes);
    } else {
      // One hash per element: its low 16 bits round m, its high 16 bits round v.
      const VU32 r0 = random_vector(counter);
      counter = hn::Add(counter, advance);
      const VU32 r1 = random_vector(counter);
      counter = hn::Add(counter, advance);
      store_upper_halves(stochastic_bits(m0, r0), stochastic_bits(m1, r1), exp_avg + i);
      store_upper_halves(stochastic_bits(v0, hn::ShiftRight<16>(r0)), stochastic_bits(v1, hn::ShiftRight<16>(r1)),
                         exp_avg_sq + i);
    }
    if (bf16_out) store_upper_halves(nearest_even_bits(p0), nearest_even_bits(p1), bf16_out + i);
  }
  // The tail (fewer than two vectors) with the scalar twin: same operations, same results.
  if (i < n) {
    uint16_t* out = bf16_out ? bf16_out + i : nullptr;
    if constexpr (sizeof(Moment) == sizeof(float)) {
      adamw_update_scalar(s, param + i, exp_avg + i, exp_avg_sq + i, grad + i, out, n - i);
    } else {
      adamw_update_bf16_moments_scalar(s, param + i, exp_avg + i, exp_avg_sq + i, grad + i, out, n - i,
                                       {rounding.key, rounding.first_index + i});
    }
  }
}

void Update(const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad, uint16_t* bf16_out,
            size_t n) {
  UpdateImpl(s, param, exp_avg, exp_avg_sq, grad, bf16_out, n, {});
}
void UpdateBf16Moments(const AdamWStep& s, float* param, uint16_t* exp_avg, uint16_t* exp_avg_sq, const float* grad,
                       uint16_t* bf16_out, size_t n, RoundingStream rounding) {
  UpdateImpl(s, param, exp_avg, exp_avg_sq, grad, bf16_out, n, rounding);
}

}  // namespace superoffload::optim::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace superoffload::optim {

HWY_EXPORT(Update);
HWY_EXPORT(UpdateBf16Moments);

void adamw_update(const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                  uint16_t* bf16_out, size_t n) {
  HWY_DYNAMIC_DISPATCH(Update)(s, param, exp_avg, exp_avg_sq, grad, bf16_out, n);
}

void adamw_update_bf16_moments(const AdamWStep& s, float* param, uint16_t* exp_avg, uint16_t* exp_avg_sq,
                               const float* grad, uint16_t* bf16_out, size_t n, RoundingStream rounding) {
  HWY_DYNAMIC_DISPATCH(UpdateBf16Moments)(s, param, exp_avg, exp_avg_sq, grad, bf16_out, n, rounding);
}

uint32_t moment_rounding_key(uint64_t sub_group_id, int64_t step) {
  return mix32(mix32(static_cast<uint32_t>(sub_group_id) ^ static_cast<uint32_t>(sub_group_id >> 32)) +
               static_cast<uint32_t>(step) * 0x9e3779b9u);
}

uint16_t bf16_round_stochastic(float x, uint32_t random16) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + (random16 & 0xffffu)) >> 16);
}

namespace {

// The per-element step, shared by both scalar twins. Returns the new weight.
inline float step_element(const AdamWStep& s, const Derived& k, float p, float g, float& m, float& v) {
  if (s.decoupled) {
    p = p * k.decay_factor;
  } else {
    g = g + k.l2 * p;
  }
  m = s.beta1 * m + k.one_minus_beta1 * g;
  v = s.beta2 * v + (k.one_minus_beta2 * g) * g;
  const float denom = std::sqrt(v) * k.inv_bc2_sqrt + s.eps;
  return p - k.step_size * (m / denom);
}

// The inverse of step_element for the same g.
inline float undo_element(const AdamWStep& s, const Derived& k, float p, float g, float& m, float& v) {
  const float denom = std::sqrt(v) * k.inv_bc2_sqrt + s.eps;
  const float before = (p + k.step_size * (m / denom)) / k.decay_factor;
  const float g_eff = s.decoupled ? g : g + k.l2 * before;
  m = (m - k.one_minus_beta1 * g_eff) / s.beta1;
  v = std::max(0.0f, (v - (k.one_minus_beta2 * g_eff) * g_eff) / s.beta2);
  return before;
}

}  // namespace

void adamw_update_scalar(const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                         uint16_t* bf16_out, size_t n) {
  const Derived k = derive(s);
  for (size_t i = 0; i < n; ++i) {
    param[i] = step_element(s, k, param[i], grad[i], exp_avg[i], exp_avg_sq[i]);
    if (bf16_out) bf16_out[i] = comm::float_to_bf16(param[i]);
  }
}

void adamw_update_bf16_moments_scalar(const AdamWStep& s, float* param, uint16_t* exp_avg, uint16_t* exp_avg_sq,
                                      const float* grad, uint16_t* bf16_out, size_t n, RoundingStream rounding) {
  const Derived k = derive(s);
  for (size_t i = 0; i < n; ++i) {
    float m = comm::bf16_to_float(exp_avg[i]), v = comm::bf16_to_float(exp_avg_sq[i]);
    param[i] = step_element(s, k, param[i], grad[i], m, v);
    const uint32_t r = random_bits(rounding.key, rounding.first_index + i);
    exp_avg[i] = bf16_round_stochastic(m, r);
    exp_avg_sq[i] = bf16_round_stochastic(v, r >> 16);
    if (bf16_out) bf16_out[i] = comm::float_to_bf16(param[i]);
  }
}

void adamw_undo(const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad, size_t n) {
  const Derived k = derive(s);
  for (size_t i = 0; i < n; ++i) param[i] = undo_element(s, k, param[i], grad[i], exp_avg[i], exp_avg_sq[i]);
}

void adamw_undo_bf16_moments(const AdamWStep& s, float* param, uint16_t* exp_avg, uint16_t* exp_avg_sq,
                             const float* grad, size_t n, RoundingStream rounding) {
  const Derived k = derive(s);
  for (size_t i = 0; i < n; ++i) {
    float m = comm::bf16_to_float(exp_avg[i]), v = comm::bf16_to_float(exp_avg_sq[i]);
    param[i] = undo_element(s, k, param[i], grad[i], m, v);
    const uint32_t r = random_bits(rounding.key ^ kUndoKey, rounding.first_index + i);
    exp_avg[i] = bf16_round_stochastic(m, r);
    exp_avg_sq[i] = bf16_round_stochastic(v, r >> 16);
  }
}

std::string adamw_target() {
  // The dispatcher takes the best target both compiled in and supported by this CPU; in
  // Highway better targets have lower bits.
  const int64_t usable = static_cast<int64_t>(hwy::SupportedTargets()) & static_cast<int64_t>(HWY_TARGETS);
  return hwy::TargetName(usable & -usable);
}

}  // namespace superoffload::optim
#endif
