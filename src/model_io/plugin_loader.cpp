// Plugin discovery, validation and model creation.
#include "model_io/plugin_loader.hpp"

#include <dlfcn.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "base/error.hpp"
#include "model/causal_lm.hpp"

namespace superoffload::model {
namespace {

constexpr int kHostCxx11Abi =
#if defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI
    1;
#else
    0;
#endif

std::string installed_plugin_dir() {
  // <prefix>/bin/superoffload → <prefix>/lib/superoffload/plugins
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const auto dir = exe.parent_path().parent_path() / "lib" / "superoffload" / "plugins";
  return std::filesystem::weakly_canonical(dir, ec).string();
}

std::string describe(const PluginCandidate& c) {
  std::string archs;
  for (const auto& a : c.architectures) archs += (archs.empty() ? "" : ", ") + a;
  return c.name + " " + c.version + " (" + c.path + ": " + archs + ")";
}

}  // namespace

std::string plugin_abi_tag() { return SUPEROFFLOAD_PLUGIN_ABI_TAG; }

std::vector<std::string> plugin_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("SUPEROFFLOAD_PLUGIN_PATH")) {
    std::stringstream stream(env);
    for (std::string dir; std::getline(stream, dir, ':');) {
      if (!dir.empty()) dirs.push_back(dir);
    }
  }
  // build/bin → build/lib/superoffload/plugins, <prefix>/bin → <prefix>/lib/superoffload/plugins:
  // the build tree has the installed layout, so one rule finds the plugins of either.
  if (auto own = installed_plugin_dir(); !own.empty()) dirs.push_back(own);
  return dirs;
}

PluginCandidate probe_plugin(const std::string& path) {
  PluginCandidate c;
  c.path = path;
  // RTLD_LOCAL: plugins do not see each other's symbols. Never dlclose'd.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* error = ::dlerror();
    c.refusal = std::string("cannot be loaded: ") + (error ? error : "unknown dlopen error");
    return c;
  }
  auto entry = reinterpret_cast<superoffload_plugin_entry_fn>(::dlsym(handle, SUPEROFFLOAD_PLUGIN_ENTRY_SYMBOL));
  if (!entry) {
    c.refusal = "is not a superoffload plugin (no " SUPEROFFLOAD_PLUGIN_ENTRY_SYMBOL " symbol)";
    return c;
  }
  const superoffload_plugin_descriptor* d = entry();
  if (!d) {
    c.refusal = "returned no descriptor";
    return c;
  }
  if (d->abi_version != SUPEROFFLOAD_PLUGIN_ABI_VERSION) {
    c.refusal = "was built for plugin ABI version " + std::to_string(d->abi_version) + ", this superoffload uses " +
                std::to_string(SUPEROFFLOAD_PLUGIN_ABI_VERSION) + "; rebuild it against this superoffload";
    return c;
  }
  if (d->descriptor_size < sizeof(superoffload_plugin_descriptor)) {
    c.refusal = "has a descriptor of " + std::to_string(d->descriptor_size) + " bytes, this superoffload expects " +
                std::to_string(sizeof(superoffload_plugin_descriptor));
    return c;
  }
  if (!d->abi_tag || std::string(d->abi_tag) != SUPEROFFLOAD_PLUGIN_ABI_TAG) {
    c.refusal = std::string("was built against other superoffload plugin headers (ABI tag ") +
                (d->abi_tag ? d->abi_tag : "(none)") + ", this superoffload has " SUPEROFFLOAD_PLUGIN_ABI_TAG
                "); rebuild it against this superoffload's headers";
    return c;
  }
  c.name = d->name ? d->name : "";
  c.version = d->version ? d->version : "";
  if (c.name.empty()) {
    c.refusal = "has no name";
    return c;
  }
  if (!d->torch_version || std::string(d->torch_version) != TORCH_VERSION) {
    c.refusal = std::string("was built against LibTorch ") + (d->torch_version ? d->torch_version : "(unknown)") +
                ", this superoffload uses LibTorch " TORCH_VERSION "; rebuild it against this LibTorch";
    return c;
  }
  if (d->cxx11_abi != kHostCxx11Abi) {
    c.refusal = "was built with _GLIBCXX_USE_CXX11_ABI=" + std::to_string(d->cxx11_abi) + ", this superoffload with " +
                std::to_string(kHostCxx11Abi);
    return c;
  }
  for (auto a = d->architectures; a && *a; ++a) c.architectures.emplace_back(*a);
  if (c.architectures.empty()) {
    c.refusal = "handles no architecture";
    return c;
  }
  for (auto k = d->required_keys; k && *k; ++k) c.required_keys.emplace_back(*k);
  if (!d->create_model || !d->destroy_model) {
    c.refusal = "has no create_model/destroy_model functions";
    return c;
  }
  c.descriptor = d;
  c.usable = true;
  return c;
}

PluginRegistry PluginRegistry::discover() {
  PluginRegistry registry;
  std::set<std::string> seen_files;
  for (const auto& dir : plugin_search_dirs()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) continue;
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".so") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      if (!seen_files.insert(file.filename().string()).second) continue;  // earlier directory wins
      registry.candidates_.push_back(probe_plugin(file.string()));
    }
  }
  return registry;
}

const PluginCandidate& PluginRegistry::select(const std::string& setting, const std::string& architecture) {
  auto found_list = [&] {
    std::string text;
    for (const auto& c : candidates_) {
      text += "\n    " + (c.usable ? describe(c) : c.path + " refused: " + c.refusal);
    }
    if (text.empty()) text = "\n    (no plugin files in " + [&] {
      std::string dirs;
      for (const auto& d : plugin_search_dirs()) dirs += (dirs.empty() ? "" : ":") + d;
      return dirs;
    }() + ")";
    return text;
  };
  if (setting.find('/') != std::string::npos || setting.ends_with(".so")) {
    candidates_.push_back(probe_plugin(setting));
    const auto& c = candidates_.back();
    if (!c.usable) throw Error("plugin " + setting + " " + c.refusal, {}, Error::UserInput{});
    return c;
  }
  for (const auto& c : candidates_) {
    if (!c.usable) continue;
    if (setting != "auto" && c.name == setting) return c;
    if (setting == "auto") {
      for (const auto& a : c.architectures) {
        if (a == architecture) return c;
      }
    }
  }
  if (setting == "auto") {
    throw Error("no plugin handles the architecture \"" + architecture + "\". Plugins found:" + found_list(),
                "set SUPEROFFLOAD_PLUGIN_PATH to a directory with a plugin for it, or [model] plugin", Error::UserInput{});
  }
  throw Error("no usable plugin named \"" + setting + "\". Plugins found:" + found_list(),
              "`superoffload plugins` lists every file tried and why any was refused", Error::UserInput{});
}

std::shared_ptr<CausalLM> create_model(const PluginCandidate& plugin, const HfConfig& config) {
  // Every missing key at once, rather than one per attempt.
  std::string missing;
  for (const auto& key : plugin.required_keys) {
    if (!config.has(key)) missing += (missing.empty() ? "" : ", ") + key;
  }
  if (!missing.empty()) {
    std::string all;
    for (const auto& key : plugin.required_keys) all += (all.empty() ? "" : ", ") + key;
    throw Error(config.path() + " lacks " + missing + ", which the " + plugin.name + " plugin requires (it needs " +
                    all + ")",
                "use the config.json of the model the weights come from", Error::UserInput{});
  }
  char error[1024] = {};
  const std::string text = config.raw().dump();
  void* raw = plugin.descriptor->create_model(text.c_str(), config.path().c_str(), error, sizeof error);
  if (!raw) {
    // The plugin's message names the file already when it comes from HfConfig.
    const std::string reason = error;
    throw Error("plugin " + plugin.name + " could not build the model: " +
                    (reason.find(config.path()) == std::string::npos ? config.path() + ": " + reason : reason),
                {}, Error::UserInput{});
  }
  auto destroy = plugin.descriptor->destroy_model;
  return std::shared_ptr<CausalLM>(static_cast<CausalLM*>(raw), [destroy](CausalLM* m) { destroy(m); });
}

}  // namespace superoffload::model
