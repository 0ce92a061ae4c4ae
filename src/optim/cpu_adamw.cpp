// CPU AdamW: Highway kernels (compiled once per target, chosen at run time) and their scalar
// twins. Operation order per element (identical in both; this file is built without FMA
// contraction, so every product and sum is rounded where it is written). With
// D(m, v) = m / (sqrt(v) · (1 / sqrt(bc2)) + ε), bc_i = 1 − β_i^step and s = grad_scale:
//   step   g = s·g;  decoupled: p = p·(1 − lr·wd)   L2: g = g + wd·p
//          m = β1·m + (1 − β1)·g;   v = β2·v + ((1 − β2)·g)·g;   p = p − (lr / bc1)·D(m, v)
//   redo   q = p + (lr / bc1)·D(m, v)                 (the weight before the step, times the decay)
//          g_old = g, g_new = s·g;   L2: both + wd·q
//          m = m + (1 − β1)·(g_new − g_old);   v = max(0, v + (1 − β2)·(g_new·g_new − g_old·g_old))
//          p = q − (lr / bc1)·D(m, v)
//   undo   q = (p + (lr / bc1)·D(m, v)) / (1 − lr·wd);   g_e = g   L2: g + wd·q
//          m = (m − (1 − β1)·g_e) / β1;   v = max(0, (v − ((1 − β2)·g_e)·g_e) / β2);   p = q
//   bf16 copy = round_to_nearest_even(p);   bf16 moments: stored as stochastic_round(m), (v)
// Redo reads and writes what a step does, so replacing a speculated step costs one pass, not
// an undo pass and a step pass; it also needs no division by β.
// One division and one square root per element in a step: on CPUs where the kernel is not at
// the memory bound (one core, or many cores per memory channel's worth of bandwidth) the
// divider is the busiest unit, and the bias-correction division was a second trip through it.
// The bf16 stores convert two vectors at once: each rounded value sits in the upper half of
// a 32-bit lane, so one ConcatOdd (a pack and a permute on AVX2) narrows both.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optim/cpu_adamw.cpp"
#include <hwy/foreach_target.h>  // NOLINT: re-includes this file once per target
#include <hwy/highway.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "comm/bf16.hpp"
#include "optim/cpu_adamw.hpp"

#ifndef SUPEROFFLOAD_ADAMW_SCALAR
#define SUPEROFFLOAD_ADAMW_SCALAR
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
// Each pass draws its own bits, so that a step and its redo or undo do not round alike.
inline uint32_t pass_key(AdamWPass pass, uint32_t key) {
  return pass == AdamWPass::step ? key : key ^ (pass == AdamWPass::redo ? 0x9e3779b9u : 0x5bd1e995u);
}
inline uint16_t stochastic_bf16(float x, uint32_t random16) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + (random16 & 0xffffu)) >> 16);
}

// One element of a pass, the reference for the SIMD code. Returns the new weight.
template <AdamWPass kPass>
inline float element(const AdamWStep& s, const Derived& k, float p, float g, float& m, float& v) {
  if constexpr (kPass == AdamWPass::step) {
    g = g * s.grad_scale;
    if (s.decoupled) {
      p = p * k.decay_factor;
    } else {
      g = g + k.l2 * p;
    }
    m = s.beta1 * m + k.one_minus_beta1 * g;
    v = s.beta2 * v + (k.one_minus_beta2 * g) * g;
    return p - k.step_size * (m / (std::sqrt(v) * k.inv_bc2_sqrt + s.eps));
  } else if constexpr (kPass == AdamWPass::redo) {
    const float q = p + k.step_size * (m / (std::sqrt(v) * k.inv_bc2_sqrt + s.eps));
    float g_old = g, g_new = g * s.grad_scale;
    if (!s.decoupled) {
      g_old = g_old + k.l2 * q;
      g_new = g_new + k.l2 * q;
    }
    m = m + k.one_minus_beta1 * (g_new - g_old);
    v = v + k.one_minus_beta2 * (g_new * g_new - g_old * g_old);
    v = v < 0.0f ? 0.0f : v;
    return q - k.step_size * (m / (std::sqrt(v) * k.inv_bc2_sqrt + s.eps));
  } else {
    const float q = (p + k.step_size * (m / (std::sqrt(v) * k.inv_bc2_sqrt + s.eps))) / k.decay_factor;
    const float g_e = s.decoupled ? g : g + k.l2 * q;
    m = (m - k.one_minus_beta1 * g_e) / s.beta1;
    v = (v - (k.one_minus_beta2 * g_e) * g_e) / s.beta2;
    v = v < 0.0f ? 0.0f : v;
    return q;
  }
}

// Calls f(std::integral_constant<AdamWPass, pass>{}): a run-time pass to a compile-time one.
template <class F>
inline void with_pass(AdamWPass pass, F&& f) {
  switch (pass) {
    case AdamWPass::step:
      return f(std::integral_constant<AdamWPass, AdamWPass::step>{});
    case AdamWPass::redo:
      return f(std::integral_constant<AdamWPass, AdamWPass::redo>{});
    case AdamWPass::undo:
      return f(std::integral_constant<AdamWPass, AdamWPass::undo>{});
  }
}

// The scalar pass; `key` is already the pass's own (pass_key).
template <AdamWPass kPass, typename Moment>
void scalar_pass(const AdamWStep& s, float* param, Moment* exp_avg, Moment* exp_avg_sq, const float* grad,
                 uint16_t* bf16_out, size_t n, uint32_t key, uint64_t first_index) {
  const Derived k = derive(s);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (sizeof(Moment) == sizeof(float)) {
      param[i] = element<kPass>(s, k, param[i], grad[i], exp_avg[i], exp_avg_sq[i]);
    } else {
      float m = comm::bf16_to_float(exp_avg[i]), v = comm::bf16_to_float(exp_avg_sq[i]);
      param[i] = element<kPass>(s, k, param[i], grad[i], m, v);
      const uint32_t r = mix32(static_cast<uint32_t>(first_index + i) + key);
      exp_avg[i] = stochastic_bf16(m, r);
      exp_avg_sq[i] = stochastic_bf16(v, r >> 16);
    }
    if (bf16_out) bf16_out[i] = comm::float_to_bf16(param[i]);
  }
}
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
// mix32 of each lane of `counter` (key + element index).
HWY_INLINE VU32 random_vector(VU32 counter) {
  const DU32 du;
  auto x = hn::Xor(counter, hn::ShiftRight<16>(counter));
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

// The per-call scalars as vectors. Set where used, not kept in a struct (SVE vectors are
// sizeless and cannot be members); once inlined into the loop the compiler hoists them.
struct Constants {
  const AdamWStep& s;
  const Derived& k;
  VF decay() const { return hn::Set(DF(), k.decay_factor); }
  VF l2() const { return hn::Set(DF(), k.l2); }
  VF beta1() const { return hn::Set(DF(), s.beta1); }
  VF beta2() const { return hn::Set(DF(), s.beta2); }
  VF one_minus_beta1() const { return hn::Set(DF(), k.one_minus_beta1); }
  VF one_minus_beta2() const { return hn::Set(DF(), k.one_minus_beta2); }
  VF step_size() const { return hn::Set(DF(), k.step_size); }
  VF grad_scale() const { return hn::Set(DF(), s.grad_scale); }
  VF zero() const { return hn::Zero(DF()); }
  VF update_direction(VF m, VF v) const {
    return hn::Div(m, hn::Add(hn::Mul(hn::Sqrt(v), hn::Set(DF(), k.inv_bc2_sqrt)), hn::Set(DF(), s.eps)));
  }
};

// One vector of a pass (element<kPass>, vectorised): returns the new weights, moments through m and v.
template <AdamWPass kPass>
HWY_INLINE VF pass_vector(const AdamWStep& s, const Constants& c, VF p, VF g, VF& m, VF& v) {
  if constexpr (kPass == AdamWPass::step) {
    g = hn::Mul(g, c.grad_scale());
    if (s.decoupled) {
      p = hn::Mul(p, c.decay());
    } else {
      g = hn::Add(g, hn::Mul(c.l2(), p));
    }
    m = hn::Add(hn::Mul(c.beta1(), m), hn::Mul(c.one_minus_beta1(), g));
    v = hn::Add(hn::Mul(c.beta2(), v), hn::Mul(hn::Mul(c.one_minus_beta2(), g), g));
    return hn::Sub(p, hn::Mul(c.step_size(), c.update_direction(m, v)));
  } else if constexpr (kPass == AdamWPass::redo) {
    const VF q = hn::Add(p, hn::Mul(c.step_size(), c.update_direction(m, v)));
    VF g_old = g, g_new = hn::Mul(g, c.grad_scale());
    if (!s.decoupled) {
      g_old = hn::Add(g_old, hn::Mul(c.l2(), q));
      g_new = hn::Add(g_new, hn::Mul(c.l2(), q));
    }
    m = hn::Add(m, hn::Mul(c.one_minus_beta1(), hn::Sub(g_new, g_old)));
    v = hn::Add(v, hn::Mul(c.one_minus_beta2(), hn::Sub(hn::Mul(g_new, g_new), hn::Mul(g_old, g_old))));
    v = hn::IfThenZeroElse(hn::Lt(v, c.zero()), v);
    return hn::Sub(q, hn::Mul(c.step_size(), c.update_direction(m, v)));
  } else {
    const VF q = hn::Div(hn::Add(p, hn::Mul(c.step_size(), c.update_direction(m, v))), c.decay());
    const VF g_e = s.decoupled ? g : hn::Add(g, hn::Mul(c.l2(), q));
    m = hn::Div(hn::Sub(m, hn::Mul(c.one_minus_beta1(), g_e)), c.beta1());
    v = hn::Div(hn::Sub(v, hn::Mul(hn::Mul(c.one_minus_beta2(), g_e), g_e)), c.beta2());
    v = hn::IfThenZeroElse(hn::Lt(v, c.zero()), v);
    return q;
  }
}

// Moment is float (fp32 moments) or uint16_t (bf16 moments, stochastic rounding). Two vectors
// per iteration (the bf16 stores narrow them together); the tail (fewer than two vectors) goes
// to the scalar twin: same operations, same results.
template <AdamWPass kPass, typename Moment>
HWY_INLINE void PassImpl(const AdamWStep& s, float* HWY_RESTRICT param, Moment* HWY_RESTRICT exp_avg,
                         Moment* HWY_RESTRICT exp_avg_sq, const float* HWY_RESTRICT grad,
                         uint16_t* HWY_RESTRICT bf16_out, size_t n, uint32_t key, uint64_t first_index) {
  const DF df;
  const DU32 du;
  const size_t lanes = hn::Lanes(df);
  const Derived k = derive(s);
  const Constants c{s, k};
  // key + element index per lane, advanced by one vector at a time (wraps modulo 2^32, as the
  // scalar twin's does). Iota is built once: on x86 it goes through memory, and inside the
  // loop its store-forwarding stall doubled the time of the bf16-moment pass.
  auto counter = hn::Add(hn::Iota(du, 0u), hn::Set(du, key + static_cast<uint32_t>(first_index)));
  const auto advance = hn::Set(du, static_cast<uint32_t>(lanes));
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    VF m0 = load_moment(exp_avg + i), v0 = load_moment(exp_avg_sq + i);
    VF m1 = load_moment(exp_avg + i + lanes), v1 = load_moment(exp_avg_sq + i + lanes);
    const VF p0 = pass_vector<kPass>(s, c, hn::LoadU(df, param + i), hn::LoadU(df, grad + i), m0, v0);
    const VF p1 = pass_vector<kPass>(s, c, hn::LoadU(df, param + i + lanes), hn::LoadU(df, grad + i + lanes), m1, v1);
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
  if (i < n) {
    scalar_pass<kPass>(s, param + i, exp_avg + i, exp_avg_sq + i, grad + i, bf16_out ? bf16_out + i : nullptr, n - i,
                       key, first_index + i);
  }
}

void PassFp32(AdamWPass pass, const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
              uint16_t* bf16_out, size_t n) {
  with_pass(pass, [&](auto p) { PassImpl<p.value>(s, param, exp_avg, exp_avg_sq, grad, bf16_out, n, 0u, 0u); });
}
void PassBf16(AdamWPass pass, const AdamWStep& s, float* param, uint16_t* exp_avg, uint16_t* exp_avg_sq,
              const float* grad, uint16_t* bf16_out, size_t n, uint32_t key, uint64_t first_index) {
  with_pass(pass, [&](auto p) { PassImpl<p.value>(s, param, exp_avg, exp_avg_sq, grad, bf16_out, n, key, first_index); });
}

}  // namespace superoffload::optim::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace superoffload::optim {

HWY_EXPORT(PassFp32);
HWY_EXPORT(PassBf16);

void adamw_pass(AdamWPass pass, const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                uint16_t* bf16_out, size_t n) {
  HWY_DYNAMIC_DISPATCH(PassFp32)(pass, s, param, exp_avg, exp_avg_sq, grad, bf16_out, n);
}

void adamw_pass(AdamWPass pass, const AdamWStep& s, float* param, uint16_t* exp_avg, uint16_t* exp_avg_sq,
                const float* grad, uint16_t* bf16_out, size_t n, RoundingStream rounding) {
  HWY_DYNAMIC_DISPATCH(PassBf16)(pass, s, param, exp_avg, exp_avg_sq, grad, bf16_out, n,
                                 pass_key(pass, rounding.key), rounding.first_index);
}

void adamw_pass_scalar(AdamWPass pass, const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq,
                       const float* grad, uint16_t* bf16_out, size_t n) {
  with_pass(pass, [&](auto p) { scalar_pass<p.value>(s, param, exp_avg, exp_avg_sq, grad, bf16_out, n, 0u, 0u); });
}

void adamw_pass_scalar(AdamWPass pass, const AdamWStep& s, float* param, uint16_t* exp_avg, uint16_t* exp_avg_sq,
                       const float* grad, uint16_t* bf16_out, size_t n, RoundingStream rounding) {
  const uint32_t key = pass_key(pass, rounding.key);
  with_pass(pass, [&](auto p) {
    scalar_pass<p.value>(s, param, exp_avg, exp_avg_sq, grad, bf16_out, n, key, rounding.first_index);
  });
}

uint32_t moment_rounding_key(uint64_t sub_group_id, int64_t step) {
  return mix32(mix32(static_cast<uint32_t>(sub_group_id) ^ static_cast<uint32_t>(sub_group_id >> 32)) +
               static_cast<uint32_t>(step) * 0x9e3779b9u);
}

uint16_t bf16_round_stochastic(float x, uint32_t random16) { return stochastic_bf16(x, random16); }

std::string adamw_target() {
  // The dispatcher takes the best target both compiled in and supported by this CPU; in
  // Highway better targets have lower bits.
  const int64_t usable = static_cast<int64_t>(hwy::SupportedTargets()) & static_cast<int64_t>(HWY_TARGETS);
  return hwy::TargetName(usable & -usable);
}

}  // namespace superoffload::optim
#endif
