// route_pairs, combine_pairs and the experts of each family, grouped and looped.
#include "experts.hpp"

#include "grouped_gemm.hpp"
#include "model/blocks/stacked_weights.hpp"
#include "model/blocks/swiglu.hpp"

namespace superoffload::plugins::moe {
namespace {

// The loop's groups: [begin, end) of each expert's sorted pairs, read on the host (on a GPU a
// synchronisation: the reference path, not the fast one).
template <class Each>
at::Tensor per_expert(const at::Tensor& input, const RoutedPairs& routed, Each each) {
  const auto ends = routed.ends.to(at::kCPU, at::kLong);
  const auto* end = ends.const_data_ptr<int64_t>();
  std::vector<at::Tensor> outputs;
  int64_t start = 0;
  for (int64_t e = 0; e < ends.numel(); ++e) {
    if (end[e] == start) continue;
    outputs.push_back(each(e, input.narrow(0, start, end[e] - start)));
    start = end[e];
  }
  return at::cat(outputs, 0);
}

}  // namespace

RoutedPairs route_pairs(const at::Tensor& indices, const at::Tensor& weights, int64_t experts) {
  RoutedPairs r;
  std::tie(r.expert, r.order) = at::sort(indices.reshape({-1}), /*stable=*/true, 0, /*descending=*/false);
  r.token = at::div(r.order, indices.size(1), "floor");
  r.weight = weights.reshape({-1}).index_select(0, r.order);
  r.ends = at::searchsorted(r.expert, at::arange(1, experts + 1, r.expert.options()), /*out_int32=*/true);
  return r;
}

at::Tensor combine_pairs(const at::Tensor& outputs, const RoutedPairs& routed, int64_t top_k) {
  const auto weighted = outputs * routed.weight.unsqueeze(1).to(outputs.scalar_type());
  // Back to (token, slot) order: each token's slots are adjacent, and summed.
  const auto by_slot = at::zeros_like(weighted).index_copy(0, routed.order, weighted);
  return by_slot.view({-1, top_k, outputs.size(1)}).sum(1);
}

at::Tensor swiglu_experts_grouped(const at::Tensor& input, const RoutedPairs& routed, const std::vector<at::Tensor>& gate,
                                  const std::vector<at::Tensor>& up, const std::vector<at::Tensor>& down) {
  std::vector<at::Tensor> gate_up;
  for (size_t e = 0; e < gate.size(); ++e) {
    gate_up.push_back(gate[e]);
    gate_up.push_back(up[e]);
  }
  // Gate and up in one product: [pairs, 2 · intermediate].
  const auto projected = grouped_linear(input, model::stacked_weights(gate_up, 2), routed.ends);
  return grouped_linear(model::swiglu(projected), model::stacked_weights(down, 1), routed.ends);
}

at::Tensor swiglu_experts_loop(const at::Tensor& input, const RoutedPairs& routed, const std::vector<at::Tensor>& gate,
                               const std::vector<at::Tensor>& up, const std::vector<at::Tensor>& down) {
  return per_expert(input, routed, [&](int64_t e, const at::Tensor& x) {
    const auto i = static_cast<size_t>(e);
    return at::linear(at::silu(at::linear(x, gate[i])) * at::linear(x, up[i]), down[i]);
  });
}

at::Tensor ClampedSwiglu::activate(const at::Tensor& rows) const {
  const auto gate = rows.slice(-1, 0, rows.size(-1), 2).clamp_max(limit);
  const auto up = rows.slice(-1, 1, rows.size(-1), 2).clamp(-limit, limit);
  return (up + 1) * (gate * at::sigmoid(gate * alpha));
}

at::Tensor clamped_experts_grouped(const at::Tensor& input, const RoutedPairs& routed, const ClampedSwiglu& x) {
  // The biases of each pair's expert, gathered per row.
  const auto gate_up = grouped_linear(input, x.gate_up.transpose(1, 2), routed.ends) +
                       x.gate_up_bias.index_select(0, routed.expert);
  return grouped_linear(x.activate(gate_up), x.down.transpose(1, 2), routed.ends) +
         x.down_bias.index_select(0, routed.expert);
}

at::Tensor clamped_experts_loop(const at::Tensor& input, const RoutedPairs& routed, const ClampedSwiglu& x) {
  return per_expert(input, routed, [&](int64_t e, const at::Tensor& rows) {
    const auto gate_up = at::addmm(x.gate_up_bias[e], rows, x.gate_up[e]);
    return at::addmm(x.down_bias[e], x.activate(gate_up), x.down[e]);
  });
}

}  // namespace superoffload::plugins::moe
