// DeepSpeed JSON → superoffload sections. The mapping follows DeepSpeed's documented keys;
// where DeepSpeed's meaning differs from the name (type "Adam" is AdamW unless
// adam_w_mode is false), the meaning wins.
#include "config/deepspeed_import.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <set>

namespace superoffload::config {
namespace {

using json = nlohmann::json;

// Byte offset → "line:column" for JSON parse errors.
std::string line_column(const std::string& text, size_t offset) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < std::min(offset, text.size()); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

class Importer {
 public:
  explicit Importer(std::string file) : file_(std::move(file)) {}

  // Copies a JSON scalar (or array of numbers) to [section] key.
  void map(const json& value, const std::string& json_path, const std::string& section, const std::string& key) {
    consumed_.insert(json_path);
    if (value.is_string() && value.get<std::string>() == "auto") {
      out_.deferred.push_back({section + "." + key, file_ + ": " + json_path});
      return;
    }
    auto* section_table = out_.table.get_as<toml::table>(section);
    if (!section_table) {
      out_.table.insert(section, toml::table{});
      section_table = out_.table.get_as<toml::table>(section);
    }
    if (value.is_boolean()) section_table->insert_or_assign(key, value.get<bool>());
    else if (value.is_number_integer()) section_table->insert_or_assign(key, value.get<std::int64_t>());
    else if (value.is_number()) section_table->insert_or_assign(key, value.get<double>());
    else if (value.is_string()) section_table->insert_or_assign(key, value.get<std::string>());
    else if (value.is_array()) {
      toml::array array;
      for (const auto& element : value) {
        if (element.is_number_integer()) array.push_back(element.get<std::int64_t>());
        else if (element.is_number()) array.push_back(element.get<double>());
        else if (element.is_boolean()) array.push_back(element.get<bool>());
        else array.push_back(element.dump());
      }
      section_table->insert_or_assign(key, std::move(array));
    } else {
      section_table->insert_or_assign(key, value.dump());
    }
    out_.origins[section + "." + key] = file_ + ": " + json_path;
  }

  void map_if(const json& object, const std::string& prefix, const std::string& name, const std::string& section,
              const std::string& key) {
    if (object.is_object() && object.contains(name)) map(object.at(name), prefix + name, section, key);
  }

  // [section] key = DeepSpeed's default, for a key the JSON leaves out (`why` says whose
  // default); the origin names it, so `superoffload config` shows where the value came from.
  void ds_default(const json& value, const std::string& json_path, const std::string& section, const std::string& key,
                  const std::string& why) {
    map(value, json_path, section, key);
    out_.origins[section + "." + key] = file_ + ": " + json_path + " absent (" + why + ")";
  }
  // As map_if, or DeepSpeed's default when the JSON leaves the key out.
  void map_or_default(const json& object, const std::string& prefix, const std::string& name, const std::string& section,
                      const std::string& key, const json& fallback, const std::string& why) {
    if (object.is_object() && object.contains(name)) map(object.at(name), prefix + name, section, key);
    else ds_default(fallback, prefix + name, section, key, why);
  }
  // A learning rate DeepSpeed gives as a ratio of the optimizer's (resolved by the loader).
  void map_ratio(const json& object, const std::string& prefix, const std::string& name, const std::string& section,
                 const std::string& key, double fallback) {
    const std::string path = prefix + name;
    consumed_.insert(path);
    const json value = object.value(name, json(fallback));
    if (value.is_string() && value.get<std::string>() == "auto") {
      out_.deferred.push_back({section + "." + key, file_ + ": " + path});
      return;
    }
    if (!value.is_number() || value.get<double>() < 0 || value.get<double>() > 1) {
      problem(path, "must be a number in [0, 1], not " + value.dump());
      return;
    }
    out_.deferred.push_back({section + "." + key, file_ + ": " + path + (object.contains(name) ? "" : " absent"),
                             /*is_auto=*/false, value.get<double>()});
  }
  void note(const std::string& text) { out_.notes.push_back(file_ + ": " + text); }
  void warn(const std::string& text) { out_.warnings.push_back(file_ + ": " + text); }

  void problem(const std::string& json_path, const std::string& text) {
    consumed_.insert(json_path);
    out_.problems.push_back(file_ + ": " + json_path + ": " + text);
  }
  void consume(const std::string& json_path) { consumed_.insert(json_path); }

  // Every leaf key not consumed becomes a warning, so nothing is dropped silently.
  void warn_unconsumed(const json& value, const std::string& path) {
    if (consumed_.count(path)) return;
    if (value.is_object() && !value.empty()) {
      for (auto it = value.begin(); it != value.end(); ++it) {
        warn_unconsumed(it.value(), path.empty() ? it.key() : path + "." + it.key());
      }
      return;
    }
    out_.warnings.push_back(file_ + ": ignored DeepSpeed key " + path + " = " + value.dump() +
                            " (no equivalent in superoffload)");
  }

  DeepSpeedImport take() { return std::move(out_); }

 private:
  std::string file_;
  DeepSpeedImport out_;
  std::set<std::string> consumed_;
};

// `parent[key]` when it is a JSON object. Present as anything else it is a problem, not a block
// skipped with a warning ("zero_optimization": "stage3" used to train on defaults).
const json* block(const json& parent, const std::string& path, const char* key, Importer& in) {
  if (!parent.contains(key)) return nullptr;
  const json& value = parent.at(key);
  if (value.is_object()) return &value;
  in.problem(path, "must be a JSON object, not " + value.dump());
  return nullptr;
}

void import_optimizer(const json& optimizer, Importer& in) {
  in.consume("optimizer.type");
  const json params = optimizer.value("params", json::object());
  if (optimizer.contains("type")) {
    const std::string type = lower(optimizer.at("type").get<std::string>());
    if (type == "adamw") {
      in.map(json("adamw"), "optimizer.type", "optimizer", "type");
    } else if (type == "adam") {
      // DeepSpeed's Adam decouples weight decay unless adam_w_mode is false.
      const bool adam_w_mode = params.value("adam_w_mode", true);
      in.map(json(adam_w_mode ? "adamw" : "adam"), "optimizer.type", "optimizer", "type");
    } else {
      in.problem("optimizer.type", "optimizer type \"" + optimizer.at("type").get<std::string>() +
                                       "\" is not supported; superoffload's CPU optimizer is Adam/AdamW");
    }
  }
  in.consume("optimizer.params.adam_w_mode");
  // What DeepSpeed's Adam (DeepSpeedCPUAdam, FusedAdam) takes when a parameter is left out.
  const std::string why = std::string(kDeepSpeedSemantics) + "'s Adam default";
  in.map_or_default(params, "optimizer.params.", "lr", "optimizer", "lr", 1e-3, why);
  in.map_or_default(params, "optimizer.params.", "betas", "optimizer", "betas", json::array({0.9, 0.999}), why);
  in.map_or_default(params, "optimizer.params.", "eps", "optimizer", "eps", 1e-8, why);
  in.map_or_default(params, "optimizer.params.", "weight_decay", "optimizer", "weight_decay", 0.0, why);
  if (params.contains("torch_adam")) in.consume("optimizer.params.torch_adam");
}

// DeepSpeed's schedulers, with their defaults for what the JSON leaves out (WarmupLR,
// WarmupDecayLR and WarmupCosineLR all warm up over 1000 steps on a log curve by default;
// WarmupDecayLR peaks at 0.001, not at the optimizer's lr; WarmupCosineLR gives its floors as
// ratios of the optimizer's lr).
void import_scheduler(const json& scheduler, Importer& in) {
  if (!scheduler.contains("type")) return;
  const std::string type = scheduler.at("type").get<std::string>();
  const json params = scheduler.value("params", json::object());
  const std::string p = "scheduler.params.";
  const std::string why = std::string(kDeepSpeedSemantics) + "'s " + type + " default";
  if (type == "WarmupLR") {
    in.map(json("constant"), "scheduler.type", "lr_schedule", "type");
  } else if (type == "WarmupDecayLR") {
    in.map(json("linear"), "scheduler.type", "lr_schedule", "type");
  } else if (type == "WarmupCosineLR") {
    in.map(json("cosine"), "scheduler.type", "lr_schedule", "type");
  } else if (type == "LRRangeTest") {
    in.map(json("lr_range_test"), "scheduler.type", "lr_schedule", "type");
    in.map_or_default(params, p, "lr_range_test_min_lr", "lr_schedule", "lr_range_test_min_lr", 1e-3, why);
    in.map_or_default(params, p, "lr_range_test_step_size", "lr_schedule", "lr_range_test_step_size", 2000, why);
    in.map_or_default(params, p, "lr_range_test_step_rate", "lr_schedule", "lr_range_test_step_rate", 1.0, why);
    in.map_or_default(params, p, "lr_range_test_staircase", "lr_schedule", "lr_range_test_staircase", false, why);
    in.ds_default(json(0), p + "(no warm-up)", "lr_schedule", "warmup_num_steps", "LRRangeTest has no warm-up");
    if (params.contains("last_batch_iteration")) in.consume(p + "last_batch_iteration");
    return;
  } else {
    in.problem("scheduler.type", "scheduler \"" + type +
                                     "\" is not supported; use WarmupLR, WarmupDecayLR, WarmupCosineLR or LRRangeTest");
    return;
  }
  in.map_or_default(params, p, "warmup_num_steps", "lr_schedule", "warmup_num_steps", 1000, why);
  in.map_or_default(params, p, "warmup_type", "lr_schedule", "warmup_type", "log", why);
  if (type == "WarmupCosineLR") {
    in.map_ratio(params, p, "warmup_min_ratio", "lr_schedule", "warmup_min_lr", 0.0);
    in.map_ratio(params, p, "cos_min_ratio", "lr_schedule", "min_lr", 1e-4);
  } else {
    in.map_or_default(params, p, "warmup_min_lr", "lr_schedule", "warmup_min_lr", 0.0, why);
    // WarmupLR / WarmupDecayLR climb to warmup_max_lr: that is the peak learning rate.
    // WarmupLR without it climbs to the optimizer's lr; WarmupDecayLR to 0.001.
    if (type == "WarmupDecayLR") {
      in.map_or_default(params, p, "warmup_max_lr", "optimizer", "lr", 1e-3, why);
      in.ds_default(0.0, p + "(decay end)", "lr_schedule", "min_lr", "WarmupDecayLR decays to 0");
    } else {
      in.map_if(params, p, "warmup_max_lr", "optimizer", "lr");
    }
  }
  // The decay horizon is the run's length (training.max_steps) here; a different
  // total_num_steps is reported rather than silently used.
  if (params.contains("last_batch_iteration")) in.consume(p + "last_batch_iteration");
}

// DeepSpeed's activation_checkpointing block configures its checkpointing of a model's own
// layers (the script calls deepspeed.checkpointing); here every layer is checkpointed per
// [training] activation_checkpointing, and cpu_checkpointing is [model] activation_offload. The
// other keys (partition_activations, contiguous_memory_optimization, number_checkpoints,
// synchronize_checkpoint_boundary, profile) concern Megatron's model-parallel activations or
// DeepSpeed's buffers, with nothing to set here: they are warned about as ignored.
void import_activation_checkpointing(const json& checkpointing, Importer& in) {
  if (!checkpointing.contains("cpu_checkpointing")) return;
  const json& value = checkpointing.at("cpu_checkpointing");
  if (!value.is_boolean()) {
    in.problem("activation_checkpointing.cpu_checkpointing", "must be true or false, not " + value.dump());
    return;
  }
  in.map(json(value.get<bool>() ? "host" : "none"), "activation_checkpointing.cpu_checkpointing", "model",
         "activation_offload");
  if (value.get<bool>()) in.map(json(true), "activation_checkpointing.cpu_checkpointing", "training", "activation_checkpointing");
}

void import_zero(const json& zero, Importer& in) {
  const std::string p = "zero_optimization.";
  if (zero.contains("stage")) {
    in.map(zero.at("stage"), p + "stage", "zero", "stage");
  }
  for (const char* key : {"sub_group_size", "reduce_bucket_size", "stage3_prefetch_bucket_size",
                          "stage3_max_live_parameters", "stage3_param_persistence_threshold"}) {
    in.map_if(zero, p, key, "zero", key);
  }
  if (const json* offload = block(zero, p + "offload_optimizer", "offload_optimizer", in)) {
    const json& off = *offload;
    const std::string q = p + "offload_optimizer.";
    if (off.contains("device")) in.map(off.at("device"), q + "device", "offload", "device");
    for (const char* key : {"pin_memory", "ratio", "super_offload", "cpuadam_cores_perc", "nvme_path", "buffer_count"}) {
      in.map_if(off, q, key, "offload", key);
    }
  }
  if (const json* offload = block(zero, p + "offload_param", "offload_param", in)) {
    const json& off = *offload;
    const std::string device = off.value("device", std::string("none"));
    if (device == "none") {
      in.consume(p + "offload_param.device");
    }
    // Any other device stays unconsumed and is warned about: parameter shards live on the
    // device here (SuperOffload offloads the optimizer only).
  }
}

// DeepSpeed's flops_profiler: enabled with profile_step (default 1) is [profile] step. Our
// profile is per layer (the unit ZeRO-3 gathers), so module_depth and detailed have no
// equivalent: noted, not silently dropped.
void import_flops_profiler(const json& profiler, Importer& in) {
  const std::string p = "flops_profiler.";
  in.consume(p + "enabled");
  const json enabled = profiler.value("enabled", json(false));
  if (!enabled.is_boolean()) {
    in.problem(p + "enabled", "must be true or false, not " + enabled.dump());
    return;
  }
  if (enabled.get<bool>()) {
    in.map_or_default(profiler, p, "profile_step", "profile", "step", 1,
                      std::string(kDeepSpeedSemantics) + "'s flops_profiler default");
  } else {
    in.consume(p + "profile_step");
  }
  in.map_if(profiler, p, "top_modules", "profile", "top_layers");
  in.map_if(profiler, p, "output_file", "profile", "output_file");
  for (const char* key : {"module_depth", "detailed"}) {
    if (!profiler.contains(key)) continue;
    in.consume(p + key);
    in.note(p + key + " = " + profiler.at(key).dump() + ": the profile is per layer (gather, forward, recompute, "
            "backward, reduce, optimizer), not per module");
  }
}

// DeepSpeed's tensorboard and csv_monitor blocks. Both monitors share one folder here
// (output_path/job_name); where the two blocks name different ones, tensorboard's wins, with
// a warning.
void import_monitors(const json& root, Importer& in) {
  const json* tensorboard = block(root, "tensorboard", "tensorboard", in);
  const json* csv = block(root, "csv_monitor", "csv_monitor", in);
  if (tensorboard) {
    in.map_if(*tensorboard, "tensorboard.", "enabled", "metrics", "tensorboard");
    in.map_if(*tensorboard, "tensorboard.", "output_path", "metrics", "output_path");
    in.map_if(*tensorboard, "tensorboard.", "job_name", "metrics", "job_name");
  }
  if (csv) {
    in.map_if(*csv, "csv_monitor.", "enabled", "metrics", "csv");
    for (const char* key : {"output_path", "job_name"}) {
      if (!csv->contains(key)) continue;
      if (tensorboard && tensorboard->contains(key) && tensorboard->at(key) != csv->at(key)) {
        in.consume(std::string("csv_monitor.") + key);
        in.warn(std::string("csv_monitor.") + key + " = " + csv->at(key).dump() + " differs from tensorboard." + key +
                " = " + tensorboard->at(key).dump() + ": both monitors write to tensorboard's");
      } else {
        in.map(csv->at(key), std::string("csv_monitor.") + key, "metrics", key);
      }
    }
  }
}

}  // namespace

DeepSpeedImport import_deepspeed_json(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::ifstream stream(path);
  if (!stream) {
    DeepSpeedImport failed;
    failed.problems.push_back("DeepSpeed config " + name + " cannot be read (missing or not readable)");
    return failed;
  }
  const std::string text((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    DeepSpeedImport failed;
    failed.problems.push_back(name + ":" + line_column(text, e.byte > 0 ? e.byte - 1 : 0) +
                              ": invalid JSON: " + e.what());
    return failed;
  }
  if (!root.is_object()) {
    DeepSpeedImport failed;
    failed.problems.push_back(name + ": a DeepSpeed config must be a JSON object");
    return failed;
  }

  Importer in(name);
  try {
    for (const char* key : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}) {
      in.map_if(root, "", key, "training", key);
    }
    // DeepSpeed ALST (Ulysses): the top-level sequence_parallel_size of the config.
    in.map_if(root, "", "sequence_parallel_size", "parallel", "sequence_parallel_size");
    in.map_or_default(root, "", "gradient_clipping", "training", "gradient_clipping", 1.0,
                      std::string(kDeepSpeedSemantics) + "'s default");
    // DeepSpeed's own progress line every N steps; it does not thin out anything else.
    in.map_if(root, "", "steps_per_print", "logging", "steps_per_print");
    in.map_if(root, "", "wall_clock_breakdown", "metrics", "wall_clock_breakdown");
    if (const json* bf16 = block(root, "bf16", "bf16", in)) in.map_if(*bf16, "bf16.", "enabled", "precision", "bf16");
    if (const json* fp16 = block(root, "fp16", "fp16", in)) {
      const json enabled = fp16->value("enabled", json(false));
      if (enabled == json(true)) {
        in.problem("fp16.enabled", "fp16 training is not supported; superoffload trains in bf16 (set \"bf16\": "
                                   "{\"enabled\": true} and drop the fp16 block)");
      } else if (enabled == json("auto")) {
        in.note("fp16.enabled = \"auto\": fp16 stays off (superoffload trains in bf16 or fp32, per [precision] bf16)");
      } else if (!enabled.is_boolean()) {
        in.problem("fp16.enabled", "must be true, false or \"auto\", not " + enabled.dump());
      }
      in.consume("fp16");  // the loss-scaling keys only matter with fp16 enabled
    }
    if (const json* zero = block(root, "zero_optimization", "zero_optimization", in)) import_zero(*zero, in);
    if (const json* checkpointing = block(root, "activation_checkpointing", "activation_checkpointing", in)) {
      import_activation_checkpointing(*checkpointing, in);
    }
    import_monitors(root, in);
    if (const json* profiler = block(root, "flops_profiler", "flops_profiler", in)) import_flops_profiler(*profiler, in);
    if (const json* optimizer = block(root, "optimizer", "optimizer", in)) {
      import_optimizer(*optimizer, in);
    } else {
      in.note("no \"optimizer\" block: DeepSpeed would use the training script's optimizer; superoffload uses its "
              "[optimizer] (AdamW unless set otherwise)");
    }
    if (const json* scheduler = block(root, "scheduler", "scheduler", in)) {
      import_scheduler(*scheduler, in);
    } else if (!root.contains("scheduler")) {
      // DeepSpeed without a scheduler (and without one from the script) keeps lr constant.
      const std::string why = "no scheduler: " + std::string(kDeepSpeedSemantics) + " keeps the learning rate constant";
      in.ds_default(json("constant"), "scheduler", "lr_schedule", "type", why);
      in.ds_default(json(0), "scheduler", "lr_schedule", "warmup_num_steps", why);
    }
  } catch (const json::exception& e) {
    in.problem("(structure)", std::string("unexpected value type: ") + e.what());
  }
  in.warn_unconsumed(root, "");
  return in.take();
}

}  // namespace superoffload::config
