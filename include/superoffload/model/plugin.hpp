// Writing a plugin: implement a CausalLM and a factory, then
//   SUPEROFFLOAD_PLUGIN("myarch", "1.0.0", kArchitectures, kRequiredKeys, &make_model)
// once in the plugin (both lists NULL-terminated; kRequiredKeys: the config.json keys it cannot
// do without, or nullptr). The macro fills in the ABI version, the ABI tag of the headers (defined
// by superoffload_add_plugin), the LibTorch version and the C++ ABI the plugin is compiled
// with, and exports the entry point.
#pragma once

#include <torch/version.h>

#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "model/causal_lm.hpp"
#include "model/hf_config.hpp"
#include "model/plugin_abi.h"

namespace superoffload::model::plugin_detail {

using Factory = std::unique_ptr<CausalLM> (*)(const HfConfig&);

inline void* create(Factory factory, const char* config_json, const char* config_path, char* error, size_t size) {
  try {
    return factory(HfConfig::parse(config_json, config_path)).release();
  } catch (const std::exception& e) {
    std::strncpy(error, e.what(), size);
    if (size) error[size - 1] = '\0';
    return nullptr;
  }
}

}  // namespace superoffload::model::plugin_detail

#if defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI
#define SUPEROFFLOAD_PLUGIN_CXX11_ABI 1
#else
#define SUPEROFFLOAD_PLUGIN_CXX11_ABI 0
#endif

// superoffload_add_plugin() defines it from the headers the plugin is compiled against; a
// plugin built another way carries no tag and is refused.
#ifndef SUPEROFFLOAD_PLUGIN_ABI_TAG
#define SUPEROFFLOAD_PLUGIN_ABI_TAG "none (not built with superoffload_add_plugin)"
#endif

#define SUPEROFFLOAD_PLUGIN(NAME, VERSION, ARCHITECTURES, REQUIRED_KEYS, FACTORY)                         \
  extern "C" __attribute__((visibility("default"))) const superoffload_plugin_descriptor*                 \
  superoffload_plugin_entry(void) {                                                                       \
    static const superoffload_plugin_descriptor descriptor = {                                            \
        SUPEROFFLOAD_PLUGIN_ABI_VERSION,                                                                  \
        sizeof(superoffload_plugin_descriptor),                                                           \
        SUPEROFFLOAD_PLUGIN_ABI_TAG,                                                                      \
        NAME,                                                                                             \
        VERSION,                                                                                          \
        TORCH_VERSION,                                                                                    \
        SUPEROFFLOAD_PLUGIN_CXX11_ABI,                                                                    \
        ARCHITECTURES,                                                                                    \
        [](const char* json, const char* path, char* error, size_t size) -> void* {                       \
          return ::superoffload::model::plugin_detail::create(FACTORY, json, path, error, size);          \
        },                                                                                                \
        [](void* model) { delete static_cast<::superoffload::model::CausalLM*>(model); },                 \
        REQUIRED_KEYS,                                                                                    \
    };                                                                                                    \
    return &descriptor;                                                                                   \
  }
