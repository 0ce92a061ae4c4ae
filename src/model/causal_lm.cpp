// Base implementations of the model contract: HF names, chunked loss, initialisation, FLOPs.
#include "model/causal_lm.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cctype>

#include "base/error.hpp"
#include "base/parallel_ranges.hpp"
#include "model/blocks/decoder_layers.hpp"
#include "model/init_seeds.hpp"

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

void CausalLM::init_parameters(uint64_t seed) {
  for (size_t i = 0; i < layers().size(); ++i) init_layer_parameters(i, seed);
}

void CausalLM::init_layer_parameters(size_t layer_index, uint64_t seed) {
  torch::NoGradGuard no_grad;
  const double std = initializer_range();
  {
    const auto& layer = layers().at(layer_index);
    const auto parameters = layer->hf_parameters();
    // A weight is drawn on the CPU in fp32, so its values are the same whatever the device and
    // dtype: straight into a CPU fp32 tensor, else into a staging tensor copied over. It is
    // drawn in blocks of kInitBlock elements, each from its own generator seeded by the
    // tensor's name and the block's index (block 0 by the name alone, so a tensor of one block
    // is what it always was): the values do not depend on the thread count, and the blocks are
    // drawn in parallel on the rank's threads (as many as LibTorch's, which the binding set).
    // On one thread an 8B's initialisation took 49-62 s on 16 cores of an H200 machine. The
    // blocks of every CPU fp32 tensor of the layer are drawn together; a tensor that needs
    // staging is drawn and copied on its own, so one staging tensor exists at a time.
    struct Block {
      at::Tensor flat;  // this block's elements of the target (or staging) tensor
      uint64_t seed;
    };
    using init_seeds::kInitBlock;
    auto blocks_of = [](const at::Tensor& tensor, uint64_t base, std::vector<Block>& blocks) {
      const auto flat = tensor.view(-1);
      for (int64_t begin = 0, index = 0; begin < flat.numel(); begin += kInitBlock, ++index) {
        blocks.push_back({flat.narrow(0, begin, std::min(kInitBlock, flat.numel() - begin)),
                          init_seeds::block_seed(base, index)});
      }
    };
    auto draw = [std](std::vector<Block>& blocks) {
      base::parallel_ranges(static_cast<int64_t>(blocks.size()), at::get_num_threads(), [&](int64_t begin, int64_t end) {
        const torch::NoGradGuard no_grad_here;  // grad mode is per thread
        for (int64_t i = begin; i < end; ++i) {
          auto& block = blocks[static_cast<size_t>(i)];
          block.flat.normal_(0.0, std, at::make_generator<at::CPUGeneratorImpl>(block.seed));
        }
      });
      blocks.clear();
    };
    std::vector<Block> direct;
    for (const auto& [name, tensor] : parameters) {
      auto target = tensor;
      switch (parameter_role(name)) {
        case ParameterRole::bias: target.zero_(); break;
        case ParameterRole::norm: target.fill_(1.0); break;
        case ParameterRole::weight: {
          const uint64_t base = init_seeds::weight_seed(seed, name);
          if (target.is_cpu() && target.scalar_type() == at::kFloat && target.is_contiguous()) {
            blocks_of(target, base, direct);
          } else {
            auto staging = at::empty(target.sizes(), at::kFloat);
            std::vector<Block> staged;
            blocks_of(staging, base, staged);
            draw(staged);
            target.copy_(staging);
          }
          break;
        }
      }
    }
    draw(direct);
    if (const auto* embedding = dynamic_cast<const TokenEmbeddingLayer*>(layer.get());
        embedding && embedding->padding_idx() >= 0) {
      embedding->embed_tokens->weight[embedding->padding_idx()].zero_();
    }
  }
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
