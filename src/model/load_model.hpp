// From a HF model directory to a model in memory: config.json, the plugin for its
// architecture, and its weights (or random initialisation).
#pragma once

#include <memory>
#include <string>

#include "model/causal_lm.hpp"
#include "model/hf_config.hpp"
#include "model/plugin_loader.hpp"

namespace superoffload::model {

struct LoadedModel {
  HfConfig config;
  PluginCandidate plugin;
  std::shared_ptr<CausalLM> model;
  bool pretrained = false;  // weights came from safetensors
};

// `plugin` is [model] plugin ("auto", a name or a .so path); `init` is [model] init ("auto",
// "pretrained" or "random"); `seed` seeds random initialisation.
LoadedModel load_model(const std::string& directory, const std::string& plugin, const std::string& init,
                       uint64_t seed);

}  // namespace superoffload::model
