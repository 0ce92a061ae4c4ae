// HF's pooled load-balancing loss and a router's statistics for it.
#include "model/load_balancing.hpp"

#include <c10/core/GradMode.h>

#include <algorithm>

#include "base/error.hpp"

namespace superoffload::model {

LoadBalancing load_balancing(const std::vector<RouterStatistics>& layers) {
  LoadBalancing out;
  if (layers.empty()) return out;
  const auto& first = layers.front();
  const int64_t experts = first.routed.numel();
  at::Tensor routed = at::zeros({experts}, first.routed.options().dtype(at::kFloat));
  at::Tensor probability = at::zeros_like(routed);
  for (const auto& l : layers) {
    SO_CHECK(l.routed.numel() == experts && l.probability.numel() == experts && l.coefficient == first.coefficient,
             "the MoE layers of one model disagree on the expert count or router_aux_loss_coef");
    routed += l.routed.detach().to(at::kFloat);
    probability += l.probability.detach().to(at::kFloat);
  }
  const double n = static_cast<double>(layers.size());
  routed /= n;
  probability /= n;
  const double e = static_cast<double>(experts);
  out.loss = (routed * probability).sum().item<double>() * e;
  out.coefficient = first.coefficient;
  out.gradient = routed * (first.coefficient * e / n);
  return out;
}

RouterStatistics router_statistics(const at::Tensor& logits, int64_t top_k, double coefficient) {
  const auto probs = at::softmax(logits.to(at::kFloat), -1);  // [T, E]
  const int64_t tokens = probs.size(0), experts = probs.size(1);
  RouterStatistics s;
  {
    c10::NoGradGuard no_grad;
    const auto chosen = std::get<1>(probs.detach().topk(top_k, -1)).reshape({-1});
    s.routed = at::zeros({experts}, probs.options().requires_grad(false))
                   .index_add_(0, chosen, at::ones({chosen.size(0)}, probs.options().requires_grad(false)))
                   .div_(static_cast<double>(std::max<int64_t>(1, tokens)));
  }
  s.probability = probs.mean(0);
  s.coefficient = coefficient;
  return s;
}

}  // namespace superoffload::model
