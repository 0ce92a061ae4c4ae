// Loading a configuration: defaults, then a DeepSpeed JSON config, then the TOML file, then
// --set overrides, each checked against the schema with the file, line and column of every
// problem. All problems are reported at once.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "config/config.hpp"

namespace superoffload::config {

struct ConfigSources {
  std::optional<std::filesystem::path> toml_file;
  std::optional<std::filesystem::path> deepspeed_json;
  std::vector<std::string> overrides;  // "section.key=value", later ones win
};

struct LoadedConfig {
  Config config;
  // "section.key" → where its value came from ("x.toml:12:18", "--set", "ds.json: key").
  // Keys left at their default are absent.
  std::map<std::string, std::string> origins;
  std::vector<std::string> warnings;  // e.g. DeepSpeed keys that were ignored
  // What a DeepSpeed import decided: "auto" resolved, DeepSpeed's defaults for absent keys,
  // and every value that differs from what the run would have without the import. Logged
  // once at start-up (info).
  std::vector<std::string> notes;
};

// Throws ConfigError listing every problem found.
LoadedConfig load_config(const ConfigSources& sources, int world_size);

class ConfigError : public Error {
 public:
  explicit ConfigError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

}  // namespace superoffload::config
