// Memory plan.
#include "train/memory_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.hpp"

namespace superoffload::train {

namespace {

int64_t get(const nlohmann::json& c, const char* key, int64_t fallback) {
  return c.contains(key) && c[key].is_number() ? c[key].get<int64_t>() : fallback;
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return text;
}

}  // namespace

ModelSize model_size_from_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path);
  SO_CHECK(in, "cannot read " << path << hint("[model] path must be a HuggingFace model directory"));
  nlohmann::json c;
  try {
    c = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    SO_FAIL(path << " is not valid JSON: " << e.what());
  }
  ModelSize m;
  m.architecture = c.contains("architectures") && !c["architectures"].empty() ? c["architectures"][0].get<std::string>() : "?";
  const bool gpt2 = c.value("model_type", "") == "gpt2";
  m.hidden = gpt2 ? get(c, "n_embd", 768) : get(c, "hidden_size", 0);
  m.layers = gpt2 ? get(c, "n_layer", 12) : get(c, "num_hidden_layers", 0);
  m.vocab = get(c, "vocab_size", 0);
  SO_CHECK(m.hidden > 0 && m.layers > 0 && m.vocab > 0, path << " lacks hidden_size, num_hidden_layers or vocab_size");
  const int64_t heads = gpt2 ? get(c, "n_head", 12) : get(c, "num_attention_heads", 1);
  const int64_t kv_heads = get(c, "num_key_value_heads", heads);
  const int64_t head_dim = get(c, "head_dim", m.hidden / std::max<int64_t>(1, heads));
  m.intermediate = gpt2 ? get(c, "n_inner", 4 * m.hidden) : get(c, "intermediate_size", 4 * m.hidden);
  const int64_t h = m.hidden;
  const int64_t attention = h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h;
  // MoE: experts of moe_intermediate_size (Qwen3-MoE) or intermediate_size (Mixtral, GPT-OSS).
  const int64_t experts = std::max({get(c, "num_experts", 0), get(c, "num_local_experts", 0), int64_t{0}});
  const int64_t top_k = std::max(get(c, "num_experts_per_tok", get(c, "experts_per_token", 2)), int64_t{1});
  const int64_t expert_width = get(c, "moe_intermediate_size", m.intermediate);
  const int64_t mlp = gpt2 ? 2 * h * m.intermediate : 3 * h * m.intermediate;
  const int64_t block_dense = attention + mlp + 2 * h;
  const int64_t block_moe = attention + experts * 3 * h * expert_width + h * experts + 2 * h;
  const int64_t block_moe_active = attention + top_k * 3 * h * expert_width + h * experts + 2 * h;
  const int64_t block = experts > 0 ? block_moe : block_dense;
  const int64_t embedding = m.vocab * h + (gpt2 ? get(c, "n_positions", 1024) * h : 0);
  const bool tied = c.value("tie_word_embeddings", gpt2);
  const int64_t head = (tied ? 0 : m.vocab * h) + h;
  m.parameters = embedding + m.layers * block + head;
  m.active_parameters = experts > 0 ? embedding + m.layers * block_moe_active + head : m.parameters;
  m.largest_layer = std::max({embedding, block, head});
  return m;
}

MemoryPlan plan_memory(const ModelSize& m, const config::Config& cfg, int ranks, bool on_gpu) {
  MemoryPlan p;
  p.ranks = ranks;
  p.on_gpu = on_gpu;
  const double n = static_cast<double>(m.parameters) / ranks;
  const double compute_bytes = cfg.precision.bf16 ? 2 : 4;
  p.device_parameter_bytes = compute_bytes * n;
  p.device_gradient_bytes = 4 * n;
  // Gathered: the running layer plus what prefetch may hold, within stage3_max_live_parameters.
  const double live = std::min<double>(static_cast<double>(cfg.zero.stage3_max_live_parameters),
                                       2.0 * static_cast<double>(m.largest_layer));
  p.device_gathered_bytes = compute_bytes * std::max<double>(live, static_cast<double>(m.largest_layer));
  const double micro = static_cast<double>(std::max<int64_t>(1, cfg.training.train_micro_batch_size_per_gpu));
  const double tokens = micro * static_cast<double>(cfg.data.seq_len);
  const double h = static_cast<double>(m.hidden), i = static_cast<double>(m.intermediate);
  // Saved layer inputs (checkpointing) or every intermediate (no checkpointing), plus one
  // layer's recompute working set and the fp32 logits of a 1024-token loss chunk (and grad).
  const double per_layer_saved = cfg.training.activation_checkpointing ? tokens * h * compute_bytes
                                                                       : tokens * (10 * h + 3 * i) * compute_bytes;
  const double working = tokens * (10 * h + 3 * i) * compute_bytes;
  const double logits = 2 * 4 * std::min(tokens, 1024.0) * static_cast<double>(m.vocab);
  p.device_activation_bytes = per_layer_saved * static_cast<double>(m.layers) + working + logits;
  const bool offloaded = cfg.offload.device == config::OffloadDevice::cpu;
  const double cpu_share = offloaded ? cfg.offload.ratio : 0.0;
  // The device share steps with fp32 master and moments on the device (12 bytes/parameter).
  p.device_optimizer_bytes = 12 * n * (1 - cpu_share);
  // Host: master (4) + moments (8 in fp32, 4 in bf16), gradient copy (4) and bf16 staging (2)
  // of the CPU share.
  const double moment_bytes = cfg.offload.optimizer_state_dtype == config::StateDtype::bf16 ? 4 : 8;
  p.host_optimizer_bytes = (4 + moment_bytes + 4 + (cfg.precision.bf16 ? 2 : 0)) * n * cpu_share;
  // Set-up materialises one full layer in fp32 before sharding it.
  p.host_setup_bytes = 4 * static_cast<double>(m.largest_layer);
  if (!on_gpu) {  // CPU runs: everything lives in host memory
    p.host_optimizer_bytes += p.device_total();
  }
  return p;
}

std::vector<std::string> describe_plan(const ModelSize& m, const MemoryPlan& p, int ranks_per_node,
                                       double device_capacity_bytes, double host_capacity_per_node_bytes) {
  std::vector<std::string> lines;
  std::ostringstream head;
  head.precision(3);
  head << m.architecture << ": " << static_cast<double>(m.parameters) / 1e9 << "B parameters";
  if (m.active_parameters != m.parameters) head << " (" << static_cast<double>(m.active_parameters) / 1e9 << "B active)";
  head << ", " << m.layers << " layers; " << p.ranks << " rank(s), " << ranks_per_node << " per node";
  lines.push_back(head.str());
  if (p.on_gpu) {
    lines.push_back("per GPU:  parameters " + gib(p.device_parameter_bytes) + ", gradients " + gib(p.device_gradient_bytes) +
                    ", gathered layers " + gib(p.device_gathered_bytes) + ", activations " + gib(p.device_activation_bytes) +
                    ", optimizer share " + gib(p.device_optimizer_bytes) + " = " + gib(p.device_total()) +
                    (device_capacity_bytes > 0 ? " of " + gib(device_capacity_bytes) : ""));
  }
  lines.push_back(std::string("per rank, host: optimizer state ") + gib(p.host_optimizer_bytes - (p.on_gpu ? 0 : p.device_total())) +
                  (p.on_gpu ? "" : " + model, gradients and activations " + gib(p.device_total())) + ", set-up " +
                  gib(p.host_setup_bytes) + " = " + gib(p.host_total()));
  lines.push_back("per node, host: " + gib(p.host_total() * ranks_per_node) +
                  (host_capacity_per_node_bytes > 0 ? " of " + gib(host_capacity_per_node_bytes) : ""));
  return lines;
}

double available_host_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace superoffload::train
