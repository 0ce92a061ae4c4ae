/* The plugin ABI: one extern "C" entry point returning a plain, versioned descriptor. The
 * host checks every field before use and refuses a mismatch naming both sides. Installed
 * for plugins built out of tree (find_package(superoffload), superoffload_add_plugin). */
#ifndef SUPEROFFLOAD_PLUGIN_ABI_H
#define SUPEROFFLOAD_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

/* Raised whenever the descriptor changes. Every other change of the installed headers (the
 * model contract, the blocks) changes the ABI tag: a hash of those headers computed when
 * superoffload is configured and again when a plugin is (superoffload_add_plugin), which
 * the host compares with its own. */
#define SUPEROFFLOAD_PLUGIN_ABI_VERSION 3
#define SUPEROFFLOAD_PLUGIN_ENTRY_SYMBOL "superoffload_plugin_entry"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct superoffload_plugin_descriptor {
  uint32_t abi_version;          /* SUPEROFFLOAD_PLUGIN_ABI_VERSION the plugin was built with */
  uint32_t descriptor_size;      /* sizeof(superoffload_plugin_descriptor) at build time */
  const char* abi_tag;           /* SUPEROFFLOAD_PLUGIN_ABI_TAG: hash of the headers it was built against */
  const char* name;              /* "llama" */
  const char* version;           /* the plugin's own version, "1.0.0" */
  const char* torch_version;     /* TORCH_VERSION of the LibTorch it was built against */
  int32_t cxx11_abi;             /* _GLIBCXX_USE_CXX11_ABI it was built with */
  const char* const* architectures; /* HF `architectures` strings handled, NULL-terminated */
  /* Builds a model (a superoffload::model::CausalLM*) from the text of config.json.
   * Returns NULL and writes a one-line reason into `error` on failure. */
  void* (*create_model)(const char* config_json, const char* config_path, char* error, size_t error_size);
  void (*destroy_model)(void* model);
  /* config.json keys every architecture of the plugin needs, NULL-terminated (or NULL): the
   * host names all that are missing at once, before create_model runs. (Since version 3.) */
  const char* const* required_keys;
} superoffload_plugin_descriptor;

typedef const superoffload_plugin_descriptor* (*superoffload_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* SUPEROFFLOAD_PLUGIN_ABI_H */
