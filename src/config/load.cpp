// Configuration loading and validation (see load.hpp).
#include "config/load.hpp"

#include <toml++/toml.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>

#include "config/batch_sizes.hpp"
#include "config/deepspeed_import.hpp"
#include "config/deepspeed_resolve.hpp"
#include "config/schema.hpp"
#include "config/step_range.hpp"
#include "config/suggest.hpp"

namespace superoffload::config {
namespace {

std::string location(const toml::node& node, const std::string& fallback) {
  const auto& src = node.source();
  if (!src.path || src.begin.line == 0) return fallback;
  return *src.path + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
}

std::string show(const toml::node& node) {
  std::ostringstream os;
  if (node.is_table()) return "a table";
  if (node.is_array()) {
    os << *node.as_array();
  } else if (const auto* real = node.as_floating_point()) {
    // As written (0.6, not toml++'s 0.59999999999999998): the shortest text that reads back.
    char text[32];
    std::snprintf(text, sizeof text, "%.15g", real->get());
    if (std::strtod(text, nullptr) != real->get()) std::snprintf(text, sizeof text, "%.17g", real->get());
    os << text;
  } else {
    node.visit([&](const auto& v) { os << v; });
  }
  return os.str();
}

std::vector<std::string> section_names() {
  std::vector<std::string> out;
  for (const auto& s : schema()) out.push_back(s.name);
  return out;
}

// Where a key that is not in `section` does live, for "did you mean".
std::string suggestion_for(const std::string& section, const std::string& key) {
  if (const Section* s = find_section(section)) {
    std::vector<std::string> keys;
    for (const auto& f : s->fields) keys.push_back(f.key);
    if (auto near = closest(key, keys); !near.empty()) return " — did you mean '" + near + "'?";
  }
  for (const auto& other : schema()) {
    for (const auto& f : other.fields) {
      if (f.key == key) return " — it belongs in [" + other.name + "]";
    }
  }
  return "";
}

// Converts a TOML node to the field's type, or explains why not.
std::optional<Value> convert(const Field& field, const toml::node& node, std::string* problem) {
  switch (field.kind) {
    case Kind::boolean:
      if (auto v = node.value_exact<bool>()) return Value{*v};
      break;
    case Kind::integer:
      if (auto v = node.value_exact<std::int64_t>()) return Value{*v};
      // DeepSpeed users write sizes as 4e8; accept floats that are whole numbers.
      if (auto d = node.value_exact<double>()) {
        if (std::isfinite(*d) && std::floor(*d) == *d && std::fabs(*d) < 9.2e18) {
          return Value{static_cast<std::int64_t>(*d)};
        }
        *problem = "expected an integer, got " + show(node);
        return std::nullopt;
      }
      break;
    case Kind::number:
      if (auto d = node.value_exact<double>()) return Value{*d};
      if (auto i = node.value_exact<std::int64_t>()) return Value{static_cast<double>(*i)};
      break;
    case Kind::string:
      if (auto s = node.value_exact<std::string>()) return Value{*s};
      if (field.integer_as_text) {
        if (auto i = node.value_exact<std::int64_t>()) return Value{std::to_string(*i)};
      }
      break;
    case Kind::number_list:
      if (const auto* array = node.as_array()) {
        std::vector<double> out;
        for (const auto& element : *array) {
          if (auto d = element.value_exact<double>()) out.push_back(*d);
          else if (auto i = element.value_exact<std::int64_t>()) out.push_back(static_cast<double>(*i));
          else {
            *problem = "expected an array of numbers, got " + show(node);
            return std::nullopt;
          }
        }
        return Value{std::move(out)};
      }
      break;
  }
  *problem = std::string("expected ") + describe(field.kind) + ", got " + show(node);
  return std::nullopt;
}

struct Setting {
  const Field* field;
  const toml::node* node;
  std::string origin;
};

// Keys renamed in a later release: the old name still loads, with a warning.
struct RenamedKey {
  const char* section;
  const char* old_key;
  const char* new_key;
  const char* why;
};
constexpr RenamedKey kRenamedKeys[] = {
    {"training", "warmup_steps", "timing_warmup_steps",
     "it counts steps left out of the timing summary, not learning-rate warm-up ([lr_schedule] warmup_num_steps)"},
};

const RenamedKey* renamed_key(const std::string& section, const std::string& key) {
  for (const auto& r : kRenamedKeys) {
    if (section == r.section && key == r.old_key) return &r;
  }
  return nullptr;
}

// HF Trainer's TrainingArguments names, accepted as written (its arguments are flat; a user
// copies them under [training]): each means what the key it maps to means.
struct HfTrainerKey {
  const char* section;
  const char* hf_key;
  const char* target_section;
  const char* target_key;
};
constexpr HfTrainerKey kHfTrainerKeys[] = {
    {"training", "eval_steps", "training", "eval_every_steps"},
    {"training", "load_best_model_at_end", "checkpoint", "keep_best"},
};

const HfTrainerKey* hf_trainer_key(const std::string& section, const std::string& key) {
  for (const auto& k : kHfTrainerKeys) {
    if (section == k.section && key == k.hf_key) return &k;
  }
  return nullptr;
}

class Loader {
 public:
  // Reads one source: a table of [section] tables. `origin_of` names a node's origin when
  // the node carries no source position (DeepSpeed import, overrides).
  void add_table(const toml::table& root, const std::string& source_name,
                 const std::map<std::string, std::string>& known_origins = {}) {
    for (const auto& [section_key, section_node] : root) {
      const std::string section(section_key.str());
      const auto* section_table = section_node.as_table();
      const std::string where = location(section_node, source_name);
      if (!find_section(section)) {
        std::string text = "unknown section [" + section + "] at " + where;
        if (!section_table) {
          text = "unknown key '" + section + "' at the top level at " + where;
          text += suggestion_for("", section);
        } else if (auto near = closest(section, section_names()); !near.empty()) {
          text += " — did you mean [" + near + "]?";
        }
        problems_.push_back(text);
        continue;
      }
      if (!section_table) {
        problems_.push_back("'" + section + "' at " + where + " must be a table ([" + section + "]), not a value");
        continue;
      }
      for (const auto& [key_name, value] : *section_table) {
        std::string key(key_name.str());
        std::string origin = location(value, source_name);
        if (const auto* renamed = renamed_key(section, key)) {
          if (section_table->contains(renamed->new_key)) {
            problems_.push_back("[" + section + "] " + key + " at " + origin + " is the old name of " + renamed->new_key +
                                ", which is set too — keep only " + renamed->new_key);
            continue;
          }
          warnings_.push_back("[" + section + "] " + key + " (" + origin + ") is deprecated: it is now " +
                              renamed->new_key + ", because " + renamed->why + " — rename it");
          key = renamed->new_key;
        }
        std::string field_section = section;
        if (const auto* hf = hf_trainer_key(section, key)) {
          const auto* target = root.get_as<toml::table>(hf->target_section);
          if (target && target->contains(hf->target_key)) {
            problems_.push_back("[" + section + "] " + key + " at " + origin + " is HF Trainer's name of [" +
                                hf->target_section + "] " + hf->target_key + ", which is set too — keep one");
            continue;
          }
          field_section = hf->target_section;
          key = hf->target_key;
          origin += " (HF Trainer's " + std::string(hf->hf_key) + ")";
        }
        const std::string dotted = field_section + "." + key;
        if (auto it = known_origins.find(dotted); it != known_origins.end()) origin = it->second;
        const Field* field = find_field(field_section, key);
        if (!field) {
          std::string key_at = origin;
          if (const auto& src = key_name.source(); src.path && src.begin.line > 0) {
            key_at = *src.path + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
          }
          problems_.push_back("unknown key '" + key + "' in [" + section + "] at " + key_at + suggestion_for(section, key));
          continue;
        }
        settings_[dotted] = Setting{field, &value, origin};
      }
    }
  }

  void add_problem(std::string text) { problems_.push_back(std::move(text)); }

  LoadedConfig finish(int world_size) {
    LoadedConfig out;
    for (const auto& [dotted, setting] : settings_) {
      std::string problem;
      auto value = convert(*setting.field, *setting.node, &problem);
      if (value && problem.empty()) problem = check_constraints(*setting.field, *value);
      if (!problem.empty()) {
        problems_.push_back(setting.field->name() + " = " + show(*setting.node) + " at " + setting.origin + ": " +
                            problem);
        continue;
      }
      setting.field->set(out.config, *value);
      out.origins[dotted] = setting.origin;
    }
    for (const auto& section : schema()) {
      for (const auto& field : section.fields) {
        if (field.required && !out.origins.count(field.dotted())) {
          problems_.push_back("missing required key " + field.name() + " (" + field.doc + ") — add `" + field.key +
                              " = " + field.example + "` under [" + section.name + "] or pass --set " +
                              field.dotted() + "=...");
        }
      }
    }
    out.warnings = warnings_;
    if (problems_.empty()) cross_checks(out, world_size);
    if (!problems_.empty()) throw ConfigError(problems_);
    return out;
  }

 private:
  std::string origin_of(const LoadedConfig& c, const std::string& dotted) const {
    auto it = c.origins.find(dotted);
    return it == c.origins.end() ? "default" : it->second;
  }

  void cross_checks(LoadedConfig& c, int world_size) {
    auto& t = c.config.training;
    // Ulysses: the ranks of a sequence-parallel group train the same samples, so the batch
    // rules count data-parallel replicas, world / sequence_parallel_size (DeepSpeed ALST's rule).
    const int64_t sp = c.config.parallel.sequence_parallel_size;
    if (world_size % sp != 0) {
      problems_.push_back("[parallel] sequence_parallel_size = " + std::to_string(sp) + " (" +
                          origin_of(c, "parallel.sequence_parallel_size") + ") does not divide the world size " +
                          std::to_string(world_size) + " — run a multiple of " + std::to_string(sp) +
                          " ranks, or choose a divisor of " + std::to_string(world_size));
      return;
    }
    if (c.config.data.seq_len % sp != 0) {
      problems_.push_back("[parallel] sequence_parallel_size = " + std::to_string(sp) + " (" +
                          origin_of(c, "parallel.sequence_parallel_size") + ") does not divide [data] seq_len = " +
                          std::to_string(c.config.data.seq_len) + " (" + origin_of(c, "data.seq_len") +
                          "): each rank holds an equal shard of every row — make seq_len a multiple of " + std::to_string(sp));
    }
    const int64_t ep = c.config.moe.expert_parallel_size;
    if (world_size % ep != 0) {
      problems_.push_back("[moe] expert_parallel_size = " + std::to_string(ep) + " (" +
                          origin_of(c, "moe.expert_parallel_size") + ") does not divide the world size " +
                          std::to_string(world_size) + " — run a multiple of " + std::to_string(ep) +
                          " ranks, or choose a divisor of " + std::to_string(world_size));
    }
    const int64_t replicas = world_size / sp;
    BatchSizes sizes{t.train_batch_size, t.train_micro_batch_size_per_gpu, t.gradient_accumulation_steps};
    std::string problem;
    if (!resolve_batch_sizes(sizes, replicas, &problem)) {
      problems_.push_back("inconsistent batch sizes in [training]: " + problem + " (train_batch_size from " +
                          origin_of(c, "training.train_batch_size") + ", train_micro_batch_size_per_gpu from " +
                          origin_of(c, "training.train_micro_batch_size_per_gpu") + ", gradient_accumulation_steps from " +
                          origin_of(c, "training.gradient_accumulation_steps") + ", world size " +
                          std::to_string(world_size) +
                          (sp > 1 ? " / sequence_parallel_size " + std::to_string(sp) + " = " + std::to_string(replicas) +
                                        " data-parallel replicas"
                                  : std::string()) +
                          ") — set two of them and let the third be derived");
    } else {
      const std::string derived = "derived for world size " + std::to_string(world_size) +
                                  (sp > 1 ? " / sequence_parallel_size " + std::to_string(sp) : std::string());
      if (t.train_batch_size == 0) c.origins["training.train_batch_size"] = derived;
      if (t.train_micro_batch_size_per_gpu == 0) c.origins["training.train_micro_batch_size_per_gpu"] = derived;
      if (t.gradient_accumulation_steps == 0) c.origins["training.gradient_accumulation_steps"] = derived;
      t.train_batch_size = sizes.train_batch_size;
      t.train_micro_batch_size_per_gpu = sizes.micro_batch;
      t.gradient_accumulation_steps = sizes.accumulation;
    }
    if (t.max_steps == 0 && t.epochs == 0) {
      problems_.push_back("[training] max_steps and epochs are both 0 (" + origin_of(c, "training.max_steps") + ", " +
                          origin_of(c, "training.epochs") + ") — set one of them");
    }
    if (c.config.lr_schedule.type != LrScheduleType::lr_range_test &&
        c.config.lr_schedule.min_lr > c.config.optimizer.lr) {
      problems_.push_back("[lr_schedule] min_lr = " + std::to_string(c.config.lr_schedule.min_lr) + " (" +
                          origin_of(c, "lr_schedule.min_lr") + ") is above [optimizer] lr = " +
                          std::to_string(c.config.optimizer.lr) + " (" + origin_of(c, "optimizer.lr") + ")");
    }
    if (c.config.offload.device == OffloadDevice::none && c.origins.count("offload.super_offload") &&
        c.config.offload.super_offload) {
      c.warnings.push_back("[offload] super_offload = true has no effect with device = \"none\" (the optimizer "
                           "runs on the device)");
    }
    if (c.config.offload.device == OffloadDevice::nvme && c.config.offload.nvme_path.empty()) {
      problems_.push_back("[offload] device = \"nvme\" (" + origin_of(c, "offload.device") +
                          ") needs nvme_path — set it to a directory on the node-local NVMe drive");
    }
    if (c.config.offload.device != OffloadDevice::nvme &&
        (c.origins.count("offload.nvme_path") || c.origins.count("offload.buffer_count"))) {
      c.warnings.push_back(std::string("[offload] nvme_path and buffer_count have no effect with device = \"") +
                           std::string(to_text(c.config.offload.device)) + "\" (only with \"nvme\")");
    }
    if (c.config.offload.device == OffloadDevice::none && c.config.offload.optimizer_state_dtype == StateDtype::bf16) {
      c.warnings.push_back("[offload] optimizer_state_dtype = \"bf16\" (" + origin_of(c, "offload.optimizer_state_dtype") +
                           ") has no effect with device = \"none\": the optimizer on the device keeps fp32 moments");
    }
    if (c.config.model.activation_offload == ActivationOffload::host && !t.activation_checkpointing) {
      problems_.push_back("[model] activation_offload = \"host\" (" + origin_of(c, "model.activation_offload") +
                          ") moves the checkpointed layer inputs to host memory, and [training] activation_checkpointing "
                          "= false (" + origin_of(c, "training.activation_checkpointing") +
                          ") keeps every activation instead — set activation_checkpointing = true, or activation_offload = "
                          "\"none\"");
    }
    check_evaluation(c);
    if (std::string problem; !parse_step_range(c.config.profile.trace_steps, problem) && !problem.empty()) {
      problems_.push_back("[profile] trace_steps = " + problem + " (" + origin_of(c, "profile.trace_steps") + ")");
    }
    warn_ignored(c);
    if (c.config.runtime.comm_backend == CommBackend::nccl && c.config.runtime.device == DeviceKind::cpu) {
      problems_.push_back("[runtime] comm_backend = \"nccl\" (" + origin_of(c, "runtime.comm_backend") +
                          ") needs device = \"cuda\" or \"auto\", not \"cpu\" (" + origin_of(c, "runtime.device") +
                          ") — NCCL works on GPU buffers only");
    }
  }

  // Validation during training: where its data comes from, and the settings that need it.
  void check_evaluation(LoadedConfig& c) {
    const auto& d = c.config.data;
    const auto& t = c.config.training;
    const bool eval_set = !d.eval_path.empty() || d.eval_fraction > 0;
    if (!d.eval_path.empty() && d.eval_fraction > 0) {
      problems_.push_back("[data] eval_path (" + origin_of(c, "data.eval_path") + ") and eval_fraction (" +
                          origin_of(c, "data.eval_fraction") + ") are both set — validate on the file, or on a share "
                          "held out of [data] path, not both");
    }
    if (!d.eval_path.empty() && !d.path.empty() &&
        std::filesystem::weakly_canonical(d.eval_path) == std::filesystem::weakly_canonical(d.path)) {
      c.warnings.push_back("[data] eval_path (" + origin_of(c, "data.eval_path") + ") is the training data " + d.path +
                           ": its eval loss measures memorisation, not generalisation — use a held-out file, or "
                           "eval_fraction to hold out a share of it");
    }
    if (eval_set) {
      if (t.early_stopping_patience > 0 && t.eval_every_steps == 0) {
        problems_.push_back("[training] early_stopping_patience = " + std::to_string(t.early_stopping_patience) + " (" +
                            origin_of(c, "training.early_stopping_patience") +
                            ") needs evaluations during the run — set [training] eval_every_steps");
      }
      return;
    }
    auto needs_eval_set = [&](const char* key, std::int64_t value) {
      if (value == 0) return;
      std::string name = key;
      name.replace(name.find('.'), 1, "] ");
      problems_.push_back("[" + name + " = " + std::to_string(value) + " (" + origin_of(c, key) +
                          ") needs validation data — set [data] eval_path (a file) or eval_fraction (a share of "
                          "[data] path held out)");
    };
    needs_eval_set("training.eval_every_steps", t.eval_every_steps);
    needs_eval_set("training.early_stopping_patience", t.early_stopping_patience);
  }

  // Settings given explicitly that this configuration does not read: a warning each, never
  // silence (the other combinations are read, or are errors above).
  void warn_ignored(LoadedConfig& c) const {
    const auto& cfg = c.config;
    auto ignored = [&](const char* key, bool when, const std::string& because) {
      if (!when || !c.origins.count(key)) return;
      std::string name = key;  // "offload.ratio" -> "[offload] ratio"
      name.replace(name.find('.'), 1, "] ");
      c.warnings.push_back("[" + name + " (" + origin_of(c, key) + ") has no effect: " + because);
    };
    const bool on_device = cfg.offload.device == OffloadDevice::none;
    for (const char* key : {"offload.ratio", "offload.pin_memory", "offload.cpuadam_cores_perc", "offload.speculation",
                            "zero.sub_group_size"}) {
      ignored(key, on_device, "[offload] device = \"none\" steps the whole optimizer on the device");
    }
    const bool range_test = cfg.lr_schedule.type == LrScheduleType::lr_range_test;
    for (const char* key : {"lr_schedule.lr_range_test_min_lr", "lr_schedule.lr_range_test_step_size",
                            "lr_schedule.lr_range_test_step_rate", "lr_schedule.lr_range_test_staircase"}) {
      ignored(key, !range_test, "only [lr_schedule] type = \"lr_range_test\" reads it");
    }
    for (const char* key : {"lr_schedule.warmup_num_steps", "lr_schedule.warmup_type", "lr_schedule.warmup_min_lr"}) {
      ignored(key, range_test, "the LR range test has no warm-up");
    }
    // ZeRO-Offload steps every CPU sub-group after backward: there is nothing to speculate.
    ignored("offload.speculation", !on_device && !cfg.offload.super_offload,
            "[offload] super_offload = false (ZeRO-Offload) steps the CPU sub-groups after backward, without "
            "speculation");
    ignored("lr_schedule.min_lr", cfg.lr_schedule.type == LrScheduleType::constant || range_test,
            "only the cosine and linear decays end at min_lr");
    const bool records = cfg.data.format == DataFormat::hdf5 || cfg.data.format == DataFormat::jsonl ||
                         cfg.data.format == DataFormat::chat;
    const bool not_chat = cfg.data.format == DataFormat::hdf5 || cfg.data.format == DataFormat::jsonl ||
                          cfg.data.format == DataFormat::alpaca;
    for (const char* key : {"data.chat_template", "data.train_on"}) {
      ignored(key, not_chat, "only chat records ([data] format = \"chat\" or \"auto\") are rendered and masked with it "
                             "(a prepared HDF5 file keeps the mask it was prepared with)");
    }
    for (const char* key : {"data.prompt_template", "data.prompt_template_no_input"}) {
      ignored(key, records, "only Alpaca records ([data] format = \"alpaca\" or \"auto\") are rendered with it");
    }
    const bool monitors = cfg.metrics.tensorboard || cfg.metrics.csv;
    for (const char* key : {"metrics.output_path", "metrics.job_name"}) {
      ignored(key, !monitors, "set [metrics] tensorboard or csv = true to write DeepSpeed's monitors");
    }
    const bool eval_set = !cfg.data.eval_path.empty() || cfg.data.eval_fraction > 0;
    for (const char* key : {"training.eval_max_batches", "training.per_device_eval_batch_size", "training.eval_on_start",
                            "training.early_stopping_threshold", "training.metric_for_best_model",
                            "checkpoint.keep_best"}) {
      ignored(key, !eval_set, "there is no validation data ([data] eval_path or eval_fraction)");
    }
    ignored("training.early_stopping_threshold", eval_set && cfg.training.early_stopping_patience == 0,
            "[training] early_stopping_patience = 0 never stops early");
    for (const char* key : {"profile.top_layers", "profile.output_file"}) {
      ignored(key, cfg.profile.step == 0, "[profile] step = 0 profiles nothing");
    }
  }

  std::map<std::string, Setting> settings_;
  std::vector<std::string> problems_;
  std::vector<std::string> warnings_;
};

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out = "invalid configuration (" + std::to_string(lines.size()) + " problem" +
                    (lines.size() == 1 ? "" : "s") + "):";
  for (const auto& line : lines) out += "\n  - " + line;
  return out;
}

}  // namespace

ConfigError::ConfigError(std::vector<std::string> problems)
    : Error(join_lines(problems), "configs/reference.toml lists every key with its default and meaning",
            UserInput{}),
      problems_(std::move(problems)) {}

LoadedConfig load_config(const ConfigSources& sources, int world_size) {
  Loader loader;
  // Tables must outlive the loader's pointers into them.
  std::optional<DeepSpeedImport> deepspeed;
  std::optional<toml::table> file_table;
  std::vector<toml::table> override_tables;
  std::vector<std::string> warnings;

  if (sources.deepspeed_json) {
    deepspeed = import_deepspeed_json(*sources.deepspeed_json);
    for (auto& p : deepspeed->problems) loader.add_problem(p);
    warnings = deepspeed->warnings;
    loader.add_table(deepspeed->table, sources.deepspeed_json->string(), deepspeed->origins);
  }
  if (sources.toml_file) {
    const auto path = sources.toml_file->string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(*sources.toml_file, ec)) {
      throw ConfigError({"configuration file " + path + " does not exist or is not a file"});
    }
    try {
      file_table = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      throw ConfigError({path + ":" + std::to_string(e.source().begin.line) + ":" +
                         std::to_string(e.source().begin.column) + ": TOML syntax error: " +
                         std::string(e.description())});
    }
    loader.add_table(*file_table, path);
  }
  override_tables.reserve(sources.overrides.size());
  for (const auto& text : sources.overrides) {
    const auto eq = text.find('=');
    const auto dot = text.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq || dot == 0 || dot + 1 == eq) {
      loader.add_problem("--set " + text + ": expected section.key=value, e.g. --set zero.sub_group_size=4e8");
      continue;
    }
    const std::string section = text.substr(0, dot), key = text.substr(dot + 1, eq - dot - 1);
    const std::string value = text.substr(eq + 1);
    toml::table parsed;
    try {
      parsed = toml::parse("v = " + value);
    } catch (const toml::parse_error&) {
      // Not a TOML value: take it as a bare string (paths, names).
      parsed = toml::table{{"v", value}};
    }
    toml::table wrapper;
    auto* node = parsed.get("v");
    toml::table inner;
    inner.insert(key, *node);
    wrapper.insert(section, std::move(inner));
    override_tables.push_back(std::move(wrapper));
    loader.add_table(override_tables.back(), "--set " + text, {{section + "." + key, "--set " + text}});
  }
  LoadedConfig loaded = loader.finish(world_size);
  loaded.warnings.insert(loaded.warnings.begin(), warnings.begin(), warnings.end());
  if (deepspeed) {
    loaded.notes = deepspeed->notes;
    std::vector<std::string> problems;
    resolve_deferred(*deepspeed, loaded, problems);
    if (!problems.empty()) throw ConfigError(problems);
    // What the run would be without the JSON (when that is a complete configuration).
    ConfigSources without = sources;
    without.deepspeed_json.reset();
    try {
      const auto plain = load_config(without, world_size);
      note_import_differences(loaded, plain.config, sources.deepspeed_json->string(), loaded.notes);
    } catch (const ConfigError&) {
      // Incomplete without the JSON (it supplies a required key): nothing to compare with.
    }
  }
  return loaded;
}

}  // namespace superoffload::config
