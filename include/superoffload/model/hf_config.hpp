// A HuggingFace config.json with typed accessors whose errors name the file and the key.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace superoffload::model {

class HfConfig {
 public:
  // Throws superoffload::Error naming `path` when the text is not a JSON object.
  static HfConfig parse(const std::string& json_text, const std::string& path);
  static HfConfig load(const std::string& path);

  const std::string& path() const { return path_; }
  const nlohmann::json& raw() const { return json_; }
  bool has(const std::string& key) const;  // present and not null

  // Required keys: a missing key or a wrong type is an error naming file and key.
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;
  bool boolean(const std::string& key) const;
  std::string string(const std::string& key) const;
  // Optional keys: the fallback when absent or null.
  int64_t integer(const std::string& key, int64_t fallback) const;
  double number(const std::string& key, double fallback) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  std::vector<std::string> strings(const std::string& key) const;  // empty when absent
  // A nested object (e.g. "rope_parameters"); null json when absent.
  const nlohmann::json& object(const std::string& key) const;

  // "architectures"[0], or "" when absent.
  std::string architecture() const;

 private:
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const;
  const nlohmann::json* find(const std::string& key) const;
  nlohmann::json json_;
  std::string path_;
};

}  // namespace superoffload::model
