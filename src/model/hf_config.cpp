// HfConfig: typed access to config.json.
#include "model/hf_config.hpp"

#include <cmath>

#include <fstream>
#include <sstream>

#include "base/error.hpp"

namespace superoffload::model {

HfConfig HfConfig::parse(const std::string& json_text, const std::string& path) {
  HfConfig config;
  config.path_ = path;
  try {
    config.json_ = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    SO_FAIL(path << ": not valid JSON: " << e.what() << hint("a HuggingFace config.json is a JSON object"));
  }
  SO_CHECK(config.json_.is_object(), path << ": a HuggingFace config.json must be a JSON object");
  return config;
}

HfConfig HfConfig::load(const std::string& path) {
  std::ifstream in(path);
  SO_CHECK(in.good(), path << " cannot be read" << hint("[model] path must be a HuggingFace directory with config.json"));
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

const nlohmann::json* HfConfig::find(const std::string& key) const {
  auto it = json_.find(key);
  if (it == json_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool HfConfig::has(const std::string& key) const { return find(key) != nullptr; }

void HfConfig::fail(const std::string& key, const std::string& problem) const {
  SO_FAIL(path_ << ": key \"" << key << "\" " << problem);
}

int64_t HfConfig::integer(const std::string& key) const {
  const auto* v = find(key);
  if (!v) fail(key, "is missing");
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float() && v->get<double>() == static_cast<double>(static_cast<int64_t>(v->get<double>()))) {
    return static_cast<int64_t>(v->get<double>());
  }
  fail(key, "must be an integer, not " + v->dump());
}

double HfConfig::number(const std::string& key) const {
  const auto* v = find(key);
  if (!v) fail(key, "is missing");
  if (!v->is_number()) fail(key, "must be a number, not " + v->dump());
  return v->get<double>();
}

bool HfConfig::boolean(const std::string& key) const {
  const auto* v = find(key);
  if (!v) fail(key, "is missing");
  if (!v->is_boolean()) fail(key, "must be true or false, not " + v->dump());
  return v->get<bool>();
}

std::string HfConfig::string(const std::string& key) const {
  const auto* v = find(key);
  if (!v) fail(key, "is missing");
  if (!v->is_string()) fail(key, "must be a string, not " + v->dump());
  return v->get<std::string>();
}

int64_t HfConfig::dimension(const std::string& key) const {
  constexpr int64_t kLargest = int64_t{1} << 24;
  const int64_t value = integer(key);
  if (value < 1 || value > kLargest) {
    fail(key, "= " + std::to_string(value) + " must lie in [1, " + std::to_string(kLargest) + "]");
  }
  return value;
}

int64_t HfConfig::dimension(const std::string& key, int64_t fallback) const { return has(key) ? dimension(key) : fallback; }

double HfConfig::positive_number(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  const double value = number(key);
  if (!std::isfinite(value) || value <= 0) fail(key, "= " + find(key)->dump() + " must be a finite number > 0");
  return value;
}

AttentionHeads HfConfig::attention_heads(int64_t hidden) const {
  AttentionHeads a;
  a.heads = dimension("num_attention_heads");
  a.kv_heads = dimension("num_key_value_heads", a.heads);
  if (a.heads % a.kv_heads != 0) {
    fail("num_key_value_heads", "= " + std::to_string(a.kv_heads) + " must divide num_attention_heads = " +
                                    std::to_string(a.heads));
  }
  if (has("head_dim")) {
    a.head_dim = dimension("head_dim");
  } else {
    if (hidden % a.heads != 0) {
      fail("num_attention_heads", "= " + std::to_string(a.heads) + " must divide hidden_size = " +
                                      std::to_string(hidden) + " (or give head_dim)");
    }
    a.head_dim = hidden / a.heads;
  }
  // RoPE rotates channel pairs (the rotated half is head_dim / 2 wide).
  if (a.head_dim % 2 != 0) {
    if (has("head_dim")) fail("head_dim", "= " + std::to_string(a.head_dim) + " must be even (RoPE rotates pairs of channels)");
    fail("num_attention_heads", "= " + std::to_string(a.heads) + " gives head_dim = hidden_size / heads = " +
                                    std::to_string(a.head_dim) + ", which must be even (RoPE rotates pairs of channels)");
  }
  return a;
}

int64_t HfConfig::integer(const std::string& key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
double HfConfig::number(const std::string& key, double fallback) const { return has(key) ? number(key) : fallback; }
bool HfConfig::boolean(const std::string& key, bool fallback) const { return has(key) ? boolean(key) : fallback; }
std::string HfConfig::string(const std::string& key, const std::string& fallback) const {
  return has(key) ? string(key) : fallback;
}

std::vector<std::string> HfConfig::strings(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return {};
  if (!v->is_array()) fail(key, "must be an array of strings, not " + v->dump());
  std::vector<std::string> out;
  for (const auto& element : *v) {
    if (!element.is_string()) fail(key, "must be an array of strings, not " + v->dump());
    out.push_back(element.get<std::string>());
  }
  return out;
}

std::vector<std::string> HfConfig::layer_types(int64_t layers) const {
  auto types = strings("layer_types");
  if (types.empty()) return types;
  if (static_cast<int64_t>(types.size()) != layers) {
    fail("layer_types", "has " + std::to_string(types.size()) + " entries, but num_hidden_layers = " +
                            std::to_string(layers) + ": give one per layer");
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != "full_attention" && types[i] != "sliding_attention") {
      fail("layer_types", "entry " + std::to_string(i) + " = \"" + types[i] +
                              "\" is not \"full_attention\" or \"sliding_attention\"");
    }
  }
  return types;
}

const nlohmann::json& HfConfig::object(const std::string& key) const {
  static const nlohmann::json null_json;
  const auto* v = find(key);
  if (!v) return null_json;
  if (!v->is_object()) fail(key, "must be an object, not " + v->dump());
  return *v;
}

int64_t HfConfig::padding_idx(int64_t vocab) const {
  if (!has("pad_token_id")) return -1;
  const int64_t pad = integer("pad_token_id");
  if (pad < -vocab || pad >= vocab) {
    fail("pad_token_id", "= " + std::to_string(pad) + " is not a row of the embedding (vocab_size " +
                             std::to_string(vocab) + "): set it to a token id below vocab_size, or null for none");
  }
  return pad < 0 ? pad + vocab : pad;
}

std::vector<std::pair<std::string, double>> HfConfig::dropouts() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [key, value] : json_.items()) {
    const bool dropout = key.find("dropout") != std::string::npos || key.find("pdrop") != std::string::npos;
    if (!dropout || key.rfind("classifier", 0) == 0 || key.rfind("summary", 0) == 0) continue;
    if (value.is_number() && value.get<double>() > 0) out.emplace_back(key, value.get<double>());
  }
  return out;
}

std::string HfConfig::architecture() const {
  auto names = strings("architectures");
  return names.empty() ? std::string() : names.front();
}

}  // namespace superoffload::model
