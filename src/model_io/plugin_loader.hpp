// Finding and loading model plugins: every *.so of SUPEROFFLOAD_PLUGIN_PATH, then of
// lib/superoffload/plugins beside the program (build tree or installation), each checked
// field by field against this host. Libraries are never unloaded, so no model can outlive its code.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/hf_config.hpp"
#include "model/plugin_abi.h"

namespace superoffload::model {

class CausalLM;

struct PluginCandidate {
  std::string path;
  bool usable = false;
  std::string refusal;  // why it was refused, when not usable
  std::string name, version;
  std::vector<std::string> architectures;
  std::vector<std::string> required_keys;  // config.json keys it cannot build without
  const superoffload_plugin_descriptor* descriptor = nullptr;
};

// Directories searched, in order.
std::vector<std::string> plugin_search_dirs();
// The ABI tag a plugin must carry to be loaded by this program (a hash of its plugin headers).
std::string plugin_abi_tag();

// Opens one library and checks its descriptor; never throws for a bad plugin (the refusal
// says why).
PluginCandidate probe_plugin(const std::string& path);

class PluginRegistry {
 public:
  // Probes every plugin file of the search directories (the first file of a given name wins).
  static PluginRegistry discover();
  const std::vector<PluginCandidate>& candidates() const { return candidates_; }

  // `setting` is [model] plugin: "auto" (the plugin handling `architecture`), a plugin
  // name, or a path to a .so. Throws listing what was found when nothing fits.
  const PluginCandidate& select(const std::string& setting, const std::string& architecture);

 private:
  std::vector<PluginCandidate> candidates_;
};

// Builds the model described by `config` with `plugin`.
std::shared_ptr<CausalLM> create_model(const PluginCandidate& plugin, const HfConfig& config);

}  // namespace superoffload::model
