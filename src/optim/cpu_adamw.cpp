// CPU AdamW: Highway kernel (compiled once per target, chosen at run time) and its scalar twin.
// Operation order per element (identical in both; this file is built without FMA contraction):
//   decoupled: p = p · (1 − lr·wd)            L2: g = g + wd·p
//   m = β1·m + (1 − β1)·g
//   v = β2·v + (1 − β2)·g·g
//   p = p − (lr / bc1) · (m / (sqrt(v) / sqrt(bc2) + ε))          bc_i = 1 − β_i^step
//   bf16 = round_to_nearest_even(p)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optim/cpu_adamw.cpp"
#include <hwy/foreach_target.h>  // NOLINT: re-includes this file once per target
#include <hwy/highway.h>

#include <cmath>

#include "comm/bf16.hpp"
#include "optim/cpu_adamw.hpp"

#ifndef SUPEROFFLOAD_ADAMW_CONSTANTS
#define SUPEROFFLOAD_ADAMW_CONSTANTS
namespace superoffload::optim {
// Scalars derived once per call, in float as the per-element arithmetic uses them.
struct Derived {
  float decay_factor, l2, one_minus_beta1, one_minus_beta2, step_size, bc2_sqrt;
};
inline Derived derive(const AdamWStep& s) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  return {s.decoupled ? 1.0f - s.lr * s.weight_decay : 1.0f, s.decoupled ? 0.0f : s.weight_decay, 1.0f - s.beta1,
          1.0f - s.beta2, static_cast<float>(static_cast<double>(s.lr) / bc1), static_cast<float>(std::sqrt(bc2))};
}
}  // namespace superoffload::optim
#endif

HWY_BEFORE_NAMESPACE();
namespace superoffload::optim::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Round-to-nearest-even fp32 → bf16 of a full vector, NaN kept quiet.
template <class DF, class DU16>
void store_bf16(DF df, DU16 du16, hn::Vec<DF> p, uint16_t* out) {
  const hn::RebindToUnsigned<DF> du32;
  const auto bits = hn::BitCast(du32, p);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du32, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du32, 0x7fffu), lsb)));
  const auto is_nan = hn::Gt(hn::And(bits, hn::Set(du32, 0x7fffffffu)), hn::Set(du32, 0x7f800000u));
  const auto quiet = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du32, 0x0040u));
  const auto result = hn::IfThenElse(is_nan, quiet, rounded);
  // Every value is below 2^16, so the signed-to-unsigned saturating demotion is exact.
  const hn::RebindToSigned<DF> di32;
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, result)), du16, out);
}

void Update(const AdamWStep& s, float* HWY_RESTRICT param, float* HWY_RESTRICT exp_avg,
            float* HWY_RESTRICT exp_avg_sq, const float* HWY_RESTRICT grad, uint16_t* HWY_RESTRICT bf16_out, size_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const size_t lanes = hn::Lanes(df);
  const Derived k = derive(s);
  const auto decay = hn::Set(df, k.decay_factor), l2 = hn::Set(df, k.l2);
  const auto beta1 = hn::Set(df, s.beta1), beta2 = hn::Set(df, s.beta2);
  const auto one_minus_beta1 = hn::Set(df, k.one_minus_beta1), one_minus_beta2 = hn::Set(df, k.one_minus_beta2);
  const auto step_size = hn::Set(df, k.step_size), bc2_sqrt = hn::Set(df, k.bc2_sqrt), eps = hn::Set(df, s.eps);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    auto p = hn::LoadU(df, param + i);
    auto g = hn::LoadU(df, grad + i);
    if (s.decoupled) {
      p = hn::Mul(p, decay);
    } else {
      g = hn::Add(g, hn::Mul(l2, p));
    }
    const auto m = hn::Add(hn::Mul(beta1, hn::LoadU(df, exp_avg + i)), hn::Mul(one_minus_beta1, g));
    const auto v = hn::Add(hn::Mul(beta2, hn::LoadU(df, exp_avg_sq + i)), hn::Mul(hn::Mul(one_minus_beta2, g), g));
    const auto denom = hn::Add(hn::Div(hn::Sqrt(v), bc2_sqrt), eps);
    p = hn::Sub(p, hn::Mul(step_size, hn::Div(m, denom)));
    hn::StoreU(m, df, exp_avg + i);
    hn::StoreU(v, df, exp_avg_sq + i);
    hn::StoreU(p, df, param + i);
    if (bf16_out) store_bf16(df, du16, p, bf16_out + i);
  }
  // The tail (fewer than one vector) with the scalar twin: same operations, same results.
  if (i < n) {
    adamw_update_scalar(s, param + i, exp_avg + i, exp_avg_sq + i, grad + i, bf16_out ? bf16_out + i : nullptr, n - i);
  }
}

}  // namespace superoffload::optim::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace superoffload::optim {

HWY_EXPORT(Update);

void adamw_update(const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                  uint16_t* bf16_out, size_t n) {
  HWY_DYNAMIC_DISPATCH(Update)(s, param, exp_avg, exp_avg_sq, grad, bf16_out, n);
}

void adamw_update_scalar(const AdamWStep& s, float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                         uint16_t* bf16_out, size_t n) {
  const Derived k = derive(s);
  for (size_t i = 0; i < n; ++i) {
    float p = param[i], g = grad[i];
    if (s.decoupled) {
      p = p * k.decay_factor;
    } else {
      g = g + k.l2 * p;
    }
    const float m = s.beta1 * exp_avg[i] + k.one_minus_beta1 * g;
    const float v = s.beta2 * exp_avg_sq[i] + (k.one_minus_beta2 * g) * g;
    const float denom = std::sqrt(v) / k.bc2_sqrt + s.eps;
    p = p - k.step_size * (m / denom);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = p;
    if (bf16_out) bf16_out[i] = comm::float_to_bf16(p);
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
