// RoPE frequencies and rotation, computed in fp32 as HF does.
#include "model/blocks/rotary.hpp"

#include <cmath>
#include <optional>
#include <string>

#include "base/error.hpp"
#include "model/hf_config.hpp"

namespace superoffload::model {

namespace {

// What a RoPE field must be: "rope_scaling.factor = 0" would train on infinite frequencies
// until the non-finite-loss guard stops step 1, a string would end in a raw JSON error.
enum class Bound { positive, non_negative };

// The number `field` of the RoPE object of config.json named `where`, checked; `fallback` when
// absent (none: required by RoPE type `type`).
double rope_number(const HfConfig& config, const std::string& where, const nlohmann::json& params,
                   const std::string& field, const std::string& type, std::optional<double> fallback, Bound bound) {
  const std::string key = where + "." + field;
  if (!params.contains(field) || params.at(field).is_null()) {
    if (!fallback) config.invalid(key, "is missing: RoPE type \"" + type + "\" needs it");
    return *fallback;
  }
  const auto& value = params.at(field);
  const bool number = value.is_number() && !value.is_boolean();
  const double x = number ? value.get<double>() : 0.0;
  if (!number || !std::isfinite(x) || (bound == Bound::positive ? x <= 0 : x < 0)) {
    config.invalid(key, "= " + value.dump() + " must be a finite number " + (bound == Bound::positive ? "> 0" : ">= 0"));
  }
  return x;
}

}  // namespace

Rotary::Rotary(const HfConfig& config, int64_t head_dim, const nlohmann::json& defaults) {
  // Newer configs: "rope_parameters": {"rope_type", "rope_theta", ...}. Older ones:
  // "rope_theta" and "rope_scaling": {"type" or "rope_type", "factor", ...}.
  std::string where = "rope_parameters";
  nlohmann::json params = config.object("rope_parameters");
  const double default_theta = defaults.is_object() ? defaults.value("rope_theta", 10000.0) : 10000.0;
  if (params.is_null()) {
    where = "rope_scaling";
    params = config.object("rope_scaling");
    if (params.is_null()) params = defaults.is_object() ? defaults : nlohmann::json::object();
    params["rope_theta"] = config.number("rope_theta", default_theta);
  }
  if (!params.contains("rope_theta")) params["rope_theta"] = config.number("rope_theta", default_theta);
  const char* type_key = params.contains("rope_type") ? "rope_type" : "type";
  const auto type_value = params.value(type_key, nlohmann::json("default"));
  if (!type_value.is_string()) config.invalid(where + "." + type_key, "= " + type_value.dump() + " must be a string");
  const std::string type = type_value.get<std::string>();
  if (type != "default" && type != "linear" && type != "llama3" && type != "yarn") {
    config.invalid(where + "." + type_key, "= \"" + type + "\" is not supported (supported: default, linear, llama3, yarn)");
  }
  if (!params["rope_theta"].is_number() || !(params["rope_theta"].get<double>() > 0) ||
      !std::isfinite(params["rope_theta"].get<double>())) {
    config.invalid("rope_theta", "= " + params["rope_theta"].dump() + " must be a finite number > 0");
  }
  const double theta = params["rope_theta"].get<double>();
  const double partial = params.contains("partial_rotary_factor")
                             ? rope_number(config, where, params, "partial_rotary_factor", type, 1.0, Bound::positive)
                             : config.positive_number("partial_rotary_factor", 1.0);
  rotary_dim_ = static_cast<int64_t>(static_cast<double>(head_dim) * partial);
  // Channels rotate in pairs.
  if (partial > 1 || rotary_dim_ < 2 || rotary_dim_ % 2 != 0) {
    config.invalid("partial_rotary_factor", "= " + std::to_string(partial) + " gives " + std::to_string(rotary_dim_) +
                                                " rotary channels of head_dim = " + std::to_string(head_dim) +
                                                ": it must lie in (0, 1] and give an even number >= 2");
  }

  const auto steps = at::arange(0, rotary_dim_, 2, at::kLong).to(at::kFloat) / static_cast<double>(rotary_dim_);
  inv_freq_ = 1.0 / at::pow(theta, steps);
  auto number = [&](const char* field, std::optional<double> fallback = std::nullopt, Bound bound = Bound::positive) {
    return rope_number(config, where, params, field, type, fallback, bound);
  };

  if (type == "default") {
  } else if (type == "linear") {
    inv_freq_ = inv_freq_ / number("factor");
  } else if (type == "llama3") {
    const double factor = number("factor");
    const double low = number("low_freq_factor");
    const double high = number("high_freq_factor");
    const double old_context = number("original_max_position_embeddings");
    if (high <= low) {
      config.invalid(where + ".high_freq_factor", "= " + std::to_string(high) + " must exceed low_freq_factor = " +
                                                      std::to_string(low) + " (the ramp between them divides by the difference)");
    }
    const double low_wavelen = old_context / low, high_wavelen = old_context / high;
    const auto wavelen = 2 * M_PI / inv_freq_;
    auto scaled = at::where(wavelen > low_wavelen, inv_freq_ / factor, inv_freq_);
    const auto smooth = (old_context / wavelen - low) / (high - low);
    const auto smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
    const auto medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
    inv_freq_ = at::where(medium, smoothed, scaled);
  } else if (type == "yarn") {
    // YaRN (GPT-OSS): interpolate low frequencies, keep high ones, ramp between; scale
    // cos/sin by the attention factor.
    const double original = number("original_max_position_embeddings");
    // Absent or 0 (older configs): the context extension itself, as HF derives it.
    double factor = number("factor", 0.0, Bound::non_negative);
    if (factor == 0) factor = static_cast<double>(config.dimension("max_position_embeddings")) / original;
    auto get_mscale = [](double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; };
    const double mscale = number("mscale", 0.0, Bound::non_negative);
    const double mscale_all_dim = number("mscale_all_dim", 0.0, Bound::non_negative);
    if (params.contains("attention_factor") && !params["attention_factor"].is_null()) {
      attention_scaling_ = number("attention_factor");
    } else if (mscale != 0.0 && mscale_all_dim != 0.0) {
      attention_scaling_ = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim);
    } else {
      attention_scaling_ = get_mscale(factor, 1.0);
    }
    const double beta_fast = number("beta_fast", 32.0), beta_slow = number("beta_slow", 1.0);
    if (params.contains("truncate") && !params["truncate"].is_boolean()) {
      config.invalid(where + ".truncate", "= " + params["truncate"].dump() + " must be true or false");
    }
    const bool truncate = params.value("truncate", true);
    const double dim = static_cast<double>(rotary_dim_);
    auto correction_dim = [&](double rotations) {
      return dim * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(theta));
    };
    double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
    if (truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;
    const auto ramp = ((at::arange(rotary_dim_ / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
    const auto extrapolation_factor = 1 - ramp;
    const auto interpolation = inv_freq_ / factor;
    inv_freq_ = interpolation * (1 - extrapolation_factor) + inv_freq_ * extrapolation_factor;
  }
}

std::pair<at::Tensor, at::Tensor> Rotary::cos_sin(const at::Tensor& position_ids, at::ScalarType dtype) const {
  std::lock_guard lock(cache_mutex_);
  auto& c = cached_;
  const uint32_t version = position_ids.is_inference() ? 0 : position_ids._version();
  if (c.positions.defined() && c.positions.unsafeGetTensorImpl() == position_ids.unsafeGetTensorImpl() &&
      c.version == version && c.dtype == dtype) {
    return {c.cos, c.sin};
  }
  if (!c.inv_freq.defined() || c.inv_freq.device() != position_ids.device()) {
    c.inv_freq = inv_freq_.to(position_ids.device());
  }
  // Positions do not take part in autograd: the kept pair holds no graph.
  at::NoGradGuard no_grad;
  const auto freqs = position_ids.to(at::kFloat).unsqueeze(-1) * c.inv_freq;  // [b, s, dim/2]
  const auto emb = at::cat({freqs, freqs}, -1);
  c.cos = (emb.cos() * attention_scaling_).to(dtype);
  c.sin = (emb.sin() * attention_scaling_).to(dtype);
  c.positions = position_ids;
  c.version = version;
  c.dtype = dtype;
  return {c.cos, c.sin};
}

at::Tensor Rotary::apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t dim = cos.size(-1);
  const auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);  // broadcast over heads
  const auto rot = x.narrow(-1, 0, dim);
  const auto half = dim / 2;
  // HF's rot · cos + rotate_half(rot) · sin, where rotate_half(rot) = [−rot₂, rot₁]. The sign
  // goes on sin instead ([−sin₁, sin₂]: a [b, 1, s, dim] tensor, heads times smaller than q), and
  // the product and sum are one addcmul: three kernels over q or k, not five (neg, cat, two
  // multiplies, add), and fewer in backward. The H200's traces put elementwise kernels at 19%
  // of the on-device step.
  const auto signed_sin = at::cat({-s.narrow(-1, 0, half), s.narrow(-1, half, dim - half)}, -1);
  const auto swapped = at::cat({rot.narrow(-1, half, dim - half), rot.narrow(-1, 0, half)}, -1);
  const auto embedded = at::addcmul(rot * c, swapped, signed_sin);
  if (dim == x.size(-1)) return embedded;
  return at::cat({embedded, x.narrow(-1, dim, x.size(-1) - dim)}, -1);
}

}  // namespace superoffload::model
