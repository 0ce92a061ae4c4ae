// Base implementations of the model contract: HF names, chunked loss, FLOPs.
#include "model/causal_lm.hpp"

#include <torch/autograd.h>

#include <algorithm>
#include <cctype>

#include "base/error.hpp"

namespace superoffload::model {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

ParameterRole parameter_role_by_name(const std::string& hf_name) {
  std::string lower = hf_name;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("bias") != std::string::npos) return ParameterRole::bias;
  if (lower.find("layernorm") != std::string::npos || lower.find("rmsnorm") != std::string::npos) {
    return ParameterRole::norm;
  }
  // A module named "norm" (model.norm) or "<something>_norm" (q_norm, k_norm).
  size_t begin = 0;
  while (begin <= lower.size()) {
    const size_t end = std::min(lower.find('.', begin), lower.size());
    const std::string part = lower.substr(begin, end - begin);
    if (part == "norm" || ends_with(part, "_norm")) return ParameterRole::norm;
    begin = end + 1;
  }
  return ParameterRole::weight;
}

at::Tensor next_token_labels(const at::Tensor& tokens) {
  const int64_t seq = tokens.size(1);
  auto labels = at::full_like(tokens, kIgnoreLabel);
  labels.narrow(1, 0, seq - 1).copy_(tokens.narrow(1, 1, seq - 1));
  return labels;
}

std::vector<std::pair<std::string, at::Tensor>> Layer::hf_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : named_parameters(/*recurse=*/true)) out.emplace_back(hf_prefix_ + item.key(), item.value());
  return out;
}

LossSum HeadLayer::chunked_loss(const at::Tensor& hidden, const at::Tensor& labels, int64_t chunk_tokens,
                                const BatchContext& context, const std::function<void(const at::Tensor&)>& each) {
  const int64_t batch = hidden.size(0), seq = hidden.size(1);
  // Positions of every row per chunk, so that a chunk's logits are chunk_tokens × vocab whatever
  // the micro-batch (the memory plan counts that): chunks of chunk_tokens positions made the
  // logits micro-batch times larger (4 × 1024 × 128k × fp32 = 2 GiB for a Llama-3 at micro-batch 4).
  const int64_t chunk = chunk_tokens > 0 ? std::max<int64_t>(1, chunk_tokens / std::max<int64_t>(1, batch)) : seq;
  // Counted on the device and not read here: on a GPU a read would make the host wait for the
  // forward before it queues the head (the caller reads it with the loss, at the end).
  LossSum total{at::zeros({}, hidden.options().dtype(at::kFloat)), labels.ne(kIgnoreLabel).sum()};
  for (int64_t start = 0; start < seq; start += chunk) {
    const int64_t length = std::min(chunk, seq - start);
    const auto chunk_labels = labels.narrow(1, start, length).reshape({-1});
    const auto logits = forward(hidden.narrow(1, start, length), context).to(at::kFloat);
    const auto chunk_loss = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), chunk_labels, {},
                                                   at::Reduction::Sum, kIgnoreLabel);
    if (each) each(chunk_loss);
    total.sum = total.sum + chunk_loss.detach();
  }
  return total;
}

LossSum HeadLayer::loss(const at::Tensor& hidden, const at::Tensor& labels, int64_t chunk_tokens,
                        const BatchContext& context) {
  return chunked_loss(hidden, labels, chunk_tokens, context, nullptr);
}

std::pair<LossSum, at::Tensor> HeadLayer::loss_and_backward(const at::Tensor& hidden, const at::Tensor& labels,
                                                            int64_t chunk_tokens, double scale,
                                                            const BatchContext& context) {
  const auto input = hidden.detach().requires_grad_(true);
  // Each chunk's backward runs at once, freeing its logits before the next chunk.
  const auto total = chunked_loss(input, labels, chunk_tokens, context,
                                  [scale](const at::Tensor& chunk_loss) { (chunk_loss * scale).backward(); });
  return {total, input.grad()};
}

int64_t CausalLM::parameter_count(const std::string& name_part) const {
  int64_t count = 0;
  for (const auto& layer : layers()) {
    for (const auto& [name, tensor] : layer->hf_parameters()) {
      if (name_part.empty() || name.find(name_part) != std::string::npos) count += tensor.numel();
    }
  }
  return count;
}

std::vector<std::string> CausalLM::hf_parameter_names() const {
  std::vector<std::string> out;
  for (const auto& layer : layers()) {
    for (const auto& [name, tensor] : layer->hf_parameters()) out.push_back(name);
  }
  return out;
}

}  // namespace superoffload::model
