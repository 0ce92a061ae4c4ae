// init_layer_ranges.
#include "model_io/random_ranges.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>

#include "base/parallel_ranges.hpp"
#include "model/blocks/decoder_layers.hpp"
#include "model/init_seeds.hpp"

namespace superoffload::model {

void init_layer_ranges(const CausalLM& model, size_t layer_index, uint64_t seed, const std::vector<WeightRange>& ranges) {
  using init_seeds::kInitBlock;
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
          draws.push_back({&range, init_seeds::weight_seed(seed, name), b, tensor.numel()});
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
      if (!block.defined() || block.numel() != size) block = at::empty({size}, at::kFloat);
      block.normal_(0.0, std, at::make_generator<at::CPUGeneratorImpl>(init_seeds::block_seed(d.weight_seed, d.block)));
      const int64_t from = std::max(start, d.range->begin), to = std::min(start + size, d.range->begin + d.range->numel);
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

}  // namespace superoffload::model
