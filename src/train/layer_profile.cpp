// LayerProfile.
#include "train/layer_profile.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace superoffload::train {

double LayerProfile::mean_seconds(size_t layer, size_t column) const {
  double sum = 0;
  for (int r = 0; r < world; ++r) {
    sum += seconds[(static_cast<size_t>(r) * layers.size() + layer) * kProfileColumns + column];
  }
  return sum / world;
}

double LayerProfile::achieved_tflops(size_t layer) const {
  const double compute_s = mean_seconds(layer, 1) + mean_seconds(layer, 2) + mean_seconds(layer, 3);
  return compute_s > 0 ? executed_flops[layer] / compute_s / 1e12 : 0.0;
}

void count_layer_flops(const ProfileShape& shape, LayerProfile& profile) {
  // The model contract: embedding first, head last, the decoder blocks between.
  const size_t n = shape.parameters.size();
  const size_t head = n - 1;
  const double blocks = n >= 3 ? static_cast<double>(n - 2) : 1.0;
  const double total = std::accumulate(shape.parameters.begin(), shape.parameters.end(), 0.0);
  const double spread = (total - shape.active_parameters) / blocks;
  profile.parameters = shape.parameters;
  profile.model_flops.assign(n, 0.0);
  profile.executed_flops.assign(n, 0.0);
  for (size_t l = 0; l < n; ++l) {
    const bool block = l > 0 && l < head;
    const double active = shape.parameters[l] - (block ? spread : 0.0);
    const double attention = block ? 4.0 * static_cast<double>(shape.hidden) * static_cast<double>(shape.seq_len) : 0.0;
    const double forward = (2.0 * active + attention) * shape.tokens_per_rank;
    profile.model_flops[l] = 3.0 * forward;
    profile.executed_flops[l] = profile.model_flops[l] + (shape.activation_checkpointing && l != head ? forward : 0.0);
  }
}

std::string format_layer_profile(const LayerProfile& p, size_t top) {
  const size_t n = p.layers.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto total_of = [&](size_t l) {
    double sum = 0;
    for (size_t c = 0; c < kProfileColumns; ++c) sum += p.mean_seconds(l, c);
    return sum;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return total_of(a) > total_of(b); });
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "profile of step %lld (ms, mean over %d rank%s): the %zu slowest of %zu layers\n",
                static_cast<long long>(p.step), p.world, p.world == 1 ? "" : "s", std::min(top, n), n);
  out += line;
  std::snprintf(line, sizeof line, "  %-28s %9s %8s %8s %9s %8s %8s %9s %9s %9s %8s\n", "layer", "params", "gather",
                "forward", "recompute", "backward", "reduce", "optimizer", "total", "GFLOP", "TFLOPS");
  out += line;
  auto row = [&](const std::string& name, double params, const std::array<double, kProfileColumns>& ms, double total_ms,
                 double gflop, double tflops) {
    std::snprintf(line, sizeof line, "  %-28s %8.2fM %8.2f %8.2f %9.2f %8.2f %8.2f %9.2f %9.2f %9.3f %8.3f\n",
                  name.c_str(), params / 1e6, ms[0], ms[1], ms[2], ms[3], ms[4], ms[5], total_ms, gflop, tflops);
    out += line;
  };
  std::array<double, kProfileColumns> sum{};
  double params_sum = 0, flops_sum = 0, total_sum = 0, compute_sum = 0;
  for (size_t l = 0; l < n; ++l) {
    std::array<double, kProfileColumns> ms{};
    for (size_t c = 0; c < kProfileColumns; ++c) {
      ms[c] = 1000 * p.mean_seconds(l, c);
      sum[c] += ms[c];
    }
    params_sum += p.parameters[l];
    flops_sum += p.executed_flops[l];
    total_sum += 1000 * total_of(l);
    compute_sum += ms[1] + ms[2] + ms[3];
  }
  for (size_t k = 0; k < std::min(top, n); ++k) {
    const size_t l = order[k];
    std::array<double, kProfileColumns> ms{};
    for (size_t c = 0; c < kProfileColumns; ++c) ms[c] = 1000 * p.mean_seconds(l, c);
    row(p.layers[l], p.parameters[l], ms, 1000 * total_of(l), p.executed_flops[l] / 1e9, p.achieved_tflops(l));
  }
  row("all layers", params_sum, sum, total_sum, flops_sum / 1e9, compute_sum > 0 ? flops_sum / (compute_sum / 1000) / 1e12 : 0.0);
  return out;
}

}  // namespace superoffload::train
