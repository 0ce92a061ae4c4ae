// resolve_deferred and note_import_differences.
#include "config/deepspeed_resolve.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>

#include "config/schema.hpp"
#include "config/toml_writer.hpp"

namespace superoffload::config {
namespace {

const Field& field_of(const std::string& dotted) {
  const auto dot = dotted.find('.');
  const Field* field = find_field(dotted.substr(0, dot), dotted.substr(dot + 1));
  if (!field) throw std::logic_error("DeepSpeed import: no key " + dotted);
  return *field;
}

// The model's hidden size from its config.json (GPT-2 calls it n_embd), or a reason.
std::optional<int64_t> hidden_size(const std::string& model_path, std::string& why) {
  const auto path = std::filesystem::path(model_path) / "config.json";
  std::ifstream in(path);
  if (!in) {
    why = path.string() + " cannot be read";
    return std::nullopt;
  }
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  for (const char* key : {"hidden_size", "n_embd", "d_model"}) {
    if (json.is_object() && json.contains(key) && json.at(key).is_number_integer() && json.at(key).get<int64_t>() > 0) {
      return json.at(key).get<int64_t>();
    }
  }
  why = path.string() + " has no positive integer hidden_size";
  return std::nullopt;
}

}  // namespace

void resolve_deferred(const DeepSpeedImport& imported, LoadedConfig& loaded, std::vector<std::string>& problems) {
  std::optional<int64_t> hidden;
  std::string hidden_problem;
  for (const auto& d : imported.deferred) {
    const Field& field = field_of(d.key);
    const std::string name = field.name();
    const std::string said = d.is_auto ? d.json_path + " = \"auto\"" : d.json_path;
    if (auto later = loaded.origins.find(d.key); later != loaded.origins.end()) {
      loaded.notes.push_back(said + ": " + name + " = " + value_text(field.get(loaded.config)) + " from " + later->second);
      continue;
    }
    if (!d.is_auto) {  // a ratio of the final learning rate
      const double value = d.ratio * loaded.config.optimizer.lr;
      field.set(loaded.config, value);
      loaded.origins[d.key] = said + " × [optimizer] lr";
      loaded.notes.push_back(said + " (" + value_text(d.ratio) + ") × [optimizer] lr: " + name + " = " +
                             value_text(value));
      continue;
    }
    const bool bucket = d.key == "zero.reduce_bucket_size" || d.key == "zero.stage3_prefetch_bucket_size" ||
                        d.key == "zero.stage3_param_persistence_threshold";
    if (!bucket) {
      loaded.notes.push_back(said + ": " + name + " = " + value_text(field.get(loaded.config)) +
                             " (superoffload's default)");
      continue;
    }
    if (!hidden && hidden_problem.empty()) hidden = hidden_size(loaded.config.model.path, hidden_problem);
    if (!hidden) {
      problems.push_back(said + " is derived from the model's hidden_size, but " + hidden_problem + " — set " + name +
                         " in the TOML file or with --set");
      continue;
    }
    const int64_t h = *hidden;
    const int64_t value = d.key == "zero.reduce_bucket_size"          ? h * h
                          : d.key == "zero.stage3_prefetch_bucket_size" ? static_cast<int64_t>(0.9 * static_cast<double>(h * h))
                                                                        : 10 * h;
    const char* rule = d.key == "zero.reduce_bucket_size"            ? "hidden_size²"
                       : d.key == "zero.stage3_prefetch_bucket_size" ? "0.9 × hidden_size²"
                                                                     : "10 × hidden_size";
    field.set(loaded.config, value);
    loaded.origins[d.key] = said + " → " + rule + " (HF Trainer's rule)";
    loaded.notes.push_back(said + ": " + name + " = " + std::to_string(value) + ", " + rule + " with hidden_size " +
                           std::to_string(h) + " (HF Trainer's rule)");
  }
}

void note_import_differences(const LoadedConfig& loaded, const Config& without_import, const std::string& json_file,
                             std::vector<std::string>& notes) {
  for (const auto& section : schema()) {
    for (const auto& field : section.fields) {
      const auto origin = loaded.origins.find(field.dotted());
      if (origin == loaded.origins.end() || origin->second.rfind(json_file, 0) != 0) continue;
      const auto value = field.get(loaded.config), otherwise = field.get(without_import);
      if (value == otherwise) continue;
      notes.push_back(field.name() + " = " + value_text(value) + " (" + origin->second + "; without it " +
                      value_text(otherwise) + ")");
    }
  }
}

}  // namespace superoffload::config
