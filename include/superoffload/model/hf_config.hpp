// A HuggingFace config.json with typed accessors whose errors name the file and the key.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace superoffload::model {

// The attention shape of a Llama-style config.json (num_attention_heads, num_key_value_heads,
// head_dim), checked: every count positive, kv heads dividing heads, and head_dim given or
// hidden_size divisible by the heads.
struct AttentionHeads {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
};

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
  // Dimensions and counts: an integer in [1, 2^24] (larger cannot be a layer of a model that
  // fits a node). Anything else is an error naming the file, the key and the value.
  int64_t dimension(const std::string& key) const;
  int64_t dimension(const std::string& key, int64_t fallback) const;
  // Epsilons, rope theta and the like: a finite number > 0.
  double positive_number(const std::string& key, double fallback) const;
  // num_attention_heads, num_key_value_heads (default: heads) and head_dim (default:
  // hidden / heads), checked as AttentionHeads says.
  AttentionHeads attention_heads(int64_t hidden) const;
  // "layer_types" (empty when absent): one entry per layer, each "full_attention" or
  // "sliding_attention".
  std::vector<std::string> layer_types(int64_t layers) const;
  // An error about `key` that the typed accessors cannot see (consistency between keys).
  [[noreturn]] void invalid(const std::string& key, const std::string& problem) const { fail(key, problem); }
  // A nested object (e.g. "rope_parameters"); null json when absent.
  const nlohmann::json& object(const std::string& key) const;

  // The embedding row HF's nn.Embedding freezes: pad_token_id when set (a negative id counts
  // from the end, as in PyTorch), else -1. An id outside [-vocab, vocab) is an error, as
  // it is for HF.
  int64_t padding_idx(int64_t vocab) const;
  // The dropout probabilities above 0 that config.json sets (keys naming a dropout or a
  // "pdrop": attention_dropout, residual_dropout, resid_pdrop, embd_pdrop, …), in key order;
  // the dropouts of heads a causal LM has not (classifier, sequence summary) are left out.
  std::vector<std::pair<std::string, double>> dropouts() const;
  // "architectures"[0], or "" when absent.
  std::string architecture() const;

 private:
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const;
  const nlohmann::json* find(const std::string& key) const;
  nlohmann::json json_;
  std::string path_;
};

}  // namespace superoffload::model
