// Test plugins that must be refused: built for another plugin ABI version (MISMATCH_ABI) or
// claiming another LibTorch (MISMATCH_TORCH). The loader must name both sides.
#include "model/plugin_abi.h"

namespace {
const char* const kArchitectures[] = {"LlamaForCausalLM", nullptr};
void* no_model(const char*, const char*, char*, size_t) { return nullptr; }
void no_destroy(void*) {}
}  // namespace

extern "C" __attribute__((visibility("default"))) const superoffload_plugin_descriptor* superoffload_plugin_entry(void) {
  static const superoffload_plugin_descriptor descriptor = {
#ifdef MISMATCH_ABI
      SUPEROFFLOAD_PLUGIN_ABI_VERSION + 1,
#else
      SUPEROFFLOAD_PLUGIN_ABI_VERSION,
#endif
      sizeof(superoffload_plugin_descriptor),
      SUPEROFFLOAD_PLUGIN_ABI_TAG,
      "mismatched",
      "0.0.1",
#ifdef MISMATCH_TORCH
      "1.13.1",
#else
      "unused",
#endif
      1,
      kArchitectures,
      no_model,
      no_destroy,
      nullptr,
  };
  return &descriptor;
}
