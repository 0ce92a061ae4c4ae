// init_layer_ranges and init_layer.
#include "model_io/random_init.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>
#include <string>

#include "base/parallel_ranges.hpp"
#include "model/blocks/decoder_layers.hpp"

namespace superoffload::model {
namespace {

// 4 Mi elements: the tensors of the tiny models the tests and the demo use are one block each.
constexpr int64_t kInitBlock = int64_t{1} << 22;

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// A 64-bit mix (SplitMix64's finaliser): seeds of a weight's later blocks, far apart.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Block 0 is seeded by the name alone: a weight of one block is what it always was.
uint64_t weight_seed(uint64_t seed, const std::string& hf_name) { return seed ^ fnv1a(hf_name); }
uint64_t block_seed(uint64_t weight, int64_t block) {
  return block == 0 ? weight : splitmix64(weight + static_cast<uint64_t>(block));
}

}  // namespace

void init_layer_ranges(const CausalLM& model, size_t layer_index, uint64_t seed, const std::vector<WeightRange>& ranges) {
  const auto& layer = model.layers().at(layer_index);
  const auto parameters = layer->hf_parameters();
  // A weight's blocks that overlap a range: each is drawn whole (its values depend on its
  // size) and the overlap copied out.
  struct Draw {
    const WeightRange* range;
    uint64_t weight_seed;
    int64_t block, weight_numel;
  };
  std::vector<Draw> draws;
  for (const auto& range : ranges) {
    if (range.numel <= 0) continue;
    const auto& [name, tensor] = parameters.at(range.parameter);
    switch (model.parameter_role(name)) {
      case ParameterRole::bias: std::fill_n(range.into, range.numel, 0.0f); break;
      case ParameterRole::norm: std::fill_n(range.into, range.numel, 1.0f); break;
      case ParameterRole::weight:
        for (int64_t b = range.begin / kInitBlock; b * kInitBlock < range.begin + range.numel; ++b) {
          draws.push_back({&range, weight_seed(seed, name), b, tensor.numel()});
        }
        break;
    }
  }
  const double std = model.initializer_range();
  base::parallel_ranges(static_cast<int64_t>(draws.size()), at::get_num_threads(), [&](int64_t first, int64_t last) {
    const torch::NoGradGuard no_grad;  // grad mode is per thread
    at::Tensor block;
    for (int64_t i = first; i < last; ++i) {
      const auto& d = draws[static_cast<size_t>(i)];
      const int64_t start = d.block * kInitBlock, size = std::min(kInitBlock, d.weight_numel - start);
      const int64_t from = std::max(start, d.range->begin), to = std::min(start + size, d.range->begin + d.range->numel);
      if (!block.defined() || block.numel() != size) block = at::empty({size}, at::kFloat);
      block.normal_(0.0, std, at::make_generator<at::CPUGeneratorImpl>(block_seed(d.weight_seed, d.block)));
      std::copy_n(block.const_data_ptr<float>() + (from - start), to - from, d.range->into + (from - d.range->begin));
    }
  });
  // HF's nn.Embedding(padding_idx): that row is 0.
  if (const auto* embedding = dynamic_cast<const TokenEmbeddingLayer*>(layer.get());
      embedding && embedding->padding_idx() >= 0) {
    const auto& table = embedding->embed_tokens->weight;
    const int64_t row_begin = embedding->padding_idx() * table.size(1), row_end = row_begin + table.size(1);
    for (const auto& range : ranges) {
      if (!parameters.at(range.parameter).second.is_same(table)) continue;
      const int64_t from = std::max(row_begin, range.begin), to = std::min(row_end, range.begin + range.numel);
      if (from < to) std::fill(range.into + (from - range.begin), range.into + (to - range.begin), 0.0f);
    }
  }
}

void init_layer(CausalLM& model, size_t layer_index, uint64_t seed) {
  const torch::NoGradGuard no_grad;
  const auto parameters = model.layers().at(layer_index)->hf_parameters();
  // CPU fp32 parameters are drawn into in place, all together (their blocks in parallel); any
  // other through an fp32 staging tensor, one parameter at a time, so one staging tensor exists.
  std::vector<WeightRange> direct;
  for (size_t p = 0; p < parameters.size(); ++p) {
    auto tensor = parameters[p].second;
    if (tensor.is_cpu() && tensor.scalar_type() == at::kFloat && tensor.is_contiguous()) {
      direct.push_back({p, 0, tensor.numel(), tensor.data_ptr<float>()});
      continue;
    }
    auto staging = at::empty(tensor.sizes(), at::kFloat);
    init_layer_ranges(model, layer_index, seed, {{p, 0, tensor.numel(), staging.data_ptr<float>()}});
    tensor.copy_(staging);
  }
  init_layer_ranges(model, layer_index, seed, direct);
}

}  // namespace superoffload::model
