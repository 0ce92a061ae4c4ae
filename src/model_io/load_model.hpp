// From a HF model directory to a model in memory: config.json, the plugin for its
// architecture, and its weights (or random initialisation).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "config/choices.hpp"
#include "model/causal_lm.hpp"
#include "model/hf_config.hpp"
#include "model_io/plugin_loader.hpp"
#include "model_io/weights.hpp"

namespace superoffload::model {

struct LoadedModel {
  HfConfig config;
  PluginCandidate plugin;
  std::shared_ptr<CausalLM> model;
  bool pretrained = false;  // weights came (or will come) from safetensors
  // With deferred loading: fills layer i (weights from the memory-mapped checkpoint, or
  // random initialisation). Until called, a layer's parameters are allocated but untouched,
  // so the operating system has not committed their memory.
  std::function<void(size_t)> materialize;
  // From safetensors only (else null): fills just the given ranges of layer i's parameters,
  // in fp32 into their buffers (load_layer_ranges), leaving the parameters untouched; a ZeRO
  // rank reads its shards with it instead of materialising whole layers.
  std::function<void(size_t, const std::vector<WeightRange>&)> fill_ranges;
  // The bytes of stored weights that materialize has read so far (0 for random initialisation).
  std::shared_ptr<double> bytes_read = std::make_shared<double>(0.0);
};

// `plugin` is [model] plugin ("auto", a name or a .so path); `init` is [model] init; `seed` seeds random initialisation. With `defer`, no layer is
// filled here: the caller materialises them one at a time (the ZeRO engine does, sharding
// each before the next, so that no rank ever holds the whole model).
LoadedModel load_model(const std::string& directory, const std::string& plugin, config::InitMode init,
                       uint64_t seed, bool defer = false, NonFiniteWeights non_finite = NonFiniteWeights::refuse);

}  // namespace superoffload::model
