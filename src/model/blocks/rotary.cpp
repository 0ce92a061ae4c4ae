// RoPE frequencies and rotation, computed in fp32 as HF does.
#include "model/blocks/rotary.hpp"

#include <cmath>

#include "base/error.hpp"
#include "model/hf_config.hpp"

namespace superoffload::model {

Rotary::Rotary(const HfConfig& config, int64_t head_dim, const nlohmann::json& defaults) {
  // Newer configs: "rope_parameters": {"rope_type", "rope_theta", ...}. Older ones:
  // "rope_theta" and "rope_scaling": {"type" or "rope_type", "factor", ...}.
  nlohmann::json params = config.object("rope_parameters");
  const double default_theta = defaults.is_object() ? defaults.value("rope_theta", 10000.0) : 10000.0;
  if (params.is_null()) {
    params = config.object("rope_scaling");
    if (params.is_null()) params = defaults.is_object() ? defaults : nlohmann::json::object();
    params["rope_theta"] = config.number("rope_theta", default_theta);
  }
  if (!params.contains("rope_theta")) params["rope_theta"] = config.number("rope_theta", default_theta);
  std::string type = params.value("rope_type", params.value("type", std::string("default")));
  if (!params["rope_theta"].is_number() || !(params["rope_theta"].get<double>() > 0) ||
      !std::isfinite(params["rope_theta"].get<double>())) {
    config.invalid("rope_theta", "= " + params["rope_theta"].dump() + " must be a finite number > 0");
  }
  const double theta = params["rope_theta"].get<double>();
  const double partial = params.value("partial_rotary_factor", config.number("partial_rotary_factor", 1.0));
  rotary_dim_ = static_cast<int64_t>(static_cast<double>(head_dim) * partial);

  const auto steps = at::arange(0, rotary_dim_, 2, at::kLong).to(at::kFloat) / static_cast<double>(rotary_dim_);
  inv_freq_ = 1.0 / at::pow(theta, steps);

  if (type == "default") {
  } else if (type == "linear") {
    inv_freq_ = inv_freq_ / params.at("factor").get<double>();
  } else if (type == "llama3") {
    const double factor = params.at("factor").get<double>();
    const double low = params.at("low_freq_factor").get<double>();
    const double high = params.at("high_freq_factor").get<double>();
    const double old_context = params.at("original_max_position_embeddings").get<double>();
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
    double factor = params.value("factor", 0.0);
    const double original = params.at("original_max_position_embeddings").get<double>();
    if (factor <= 0) factor = config.number("max_position_embeddings") / original;
    auto get_mscale = [](double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; };
    if (params.contains("attention_factor") && !params["attention_factor"].is_null()) {
      attention_scaling_ = params["attention_factor"].get<double>();
    } else if (params.value("mscale", 0.0) != 0.0 && params.value("mscale_all_dim", 0.0) != 0.0) {
      attention_scaling_ = get_mscale(factor, params["mscale"].get<double>()) /
                           get_mscale(factor, params["mscale_all_dim"].get<double>());
    } else {
      attention_scaling_ = get_mscale(factor, 1.0);
    }
    const double beta_fast = params.value("beta_fast", 32.0), beta_slow = params.value("beta_slow", 1.0);
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
  } else {
    SO_FAIL(config.path() << ": RoPE type \"" << type << "\" is not supported (supported: default, linear, llama3, yarn)");
  }
}

std::pair<at::Tensor, at::Tensor> Rotary::cos_sin(const at::Tensor& position_ids, at::ScalarType dtype) const {
  const auto inv = inv_freq_.to(position_ids.device());
  const auto freqs = position_ids.to(at::kFloat).unsqueeze(-1) * inv;  // [b, s, dim/2]
  const auto emb = at::cat({freqs, freqs}, -1);
  return {(emb.cos() * attention_scaling_).to(dtype), (emb.sin() * attention_scaling_).to(dtype)};
}

at::Tensor Rotary::apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t dim = cos.size(-1);
  const auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);  // broadcast over heads
  const auto rot = x.narrow(-1, 0, dim);
  const auto half = dim / 2;
  const auto rotated_half = at::cat({-rot.narrow(-1, half, half), rot.narrow(-1, 0, half)}, -1);
  const auto embedded = rot * c + rotated_half * s;
  if (dim == x.size(-1)) return embedded;
  return at::cat({embedded, x.narrow(-1, dim, x.size(-1) - dim)}, -1);
}

}  // namespace superoffload::model
