// DeepSpeed JSON import: the SuperOffload example configs import cleanly, DeepSpeed's
// meanings are kept, and nothing is dropped without a warning.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "config/load.hpp"

namespace so = superoffload;
using so::config::ConfigSources;

namespace {

const std::string kData = std::string(SUPEROFFLOAD_SOURCE_DIR) + "/tests/data/deepspeed/";
const std::vector<std::string> kRequired = {"model.path=/m", "data.path=/d.jsonl"};

so::config::LoadedConfig load_ds(const std::string& file, int world_size = 1) {
  return so::config::load_config(ConfigSources{std::nullopt, kData + file, kRequired}, world_size);
}

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const ConfigSources& sources, int world_size = 1) {
  try {
    so::config::load_config(sources, world_size);
  } catch (const so::config::ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

TEST(DeepSpeedImport, SuperOffloadExampleImports) {
  auto loaded = load_ds("superoffload_mode.json");
  const auto& c = loaded.config;
  EXPECT_EQ(c.training.train_batch_size, 4);
  EXPECT_EQ(c.training.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.training.train_micro_batch_size_per_gpu, 4);
  EXPECT_TRUE(c.precision.bf16);
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.reduce_bucket_size, 800'000'000);
  EXPECT_EQ(c.zero.sub_group_size, 800'000'000);
  EXPECT_EQ(c.offload.device, superoffload::config::OffloadDevice::cpu);
  EXPECT_TRUE(c.offload.pin_memory);
  EXPECT_DOUBLE_EQ(c.offload.ratio, 0.9);
  EXPECT_TRUE(c.offload.super_offload);
  EXPECT_DOUBLE_EQ(c.offload.cpuadam_cores_perc, 0.9);
  EXPECT_TRUE(c.metrics.wall_clock_breakdown);
  ASSERT_EQ(loaded.warnings.size(), 1u);
  EXPECT_NE(loaded.warnings[0].find("zero_optimization.overlap_comm"), std::string::npos) << loaded.warnings[0];
  EXPECT_EQ(loaded.origins.at("offload.ratio"), kData + "superoffload_mode.json: zero_optimization.offload_optimizer.ratio");
}

TEST(DeepSpeedImport, ZeroOffloadExampleImports) {
  auto loaded = load_ds("zerooffload_mode.json");
  EXPECT_EQ(loaded.config.zero.sub_group_size, 400'000'000);
  EXPECT_EQ(loaded.config.offload.device, superoffload::config::OffloadDevice::cpu);
  EXPECT_EQ(loaded.warnings.size(), 1u);
}

TEST(DeepSpeedImport, OptimizerSchedulerAndWarnings) {
  auto loaded = load_ds("full_featured.json", 2);
  const auto& c = loaded.config;
  EXPECT_EQ(c.training.train_batch_size, 2 * 4 * 2);
  EXPECT_DOUBLE_EQ(c.training.gradient_clipping, 0.5);
  EXPECT_EQ(c.logging.steps_per_print, 5);  // DeepSpeed's progress line, not our step line
  EXPECT_EQ(c.logging.log_every_steps, 1);
  EXPECT_EQ(c.optimizer.type, superoffload::config::OptimizerType::adamw);  // DeepSpeed's "Adam" decouples weight decay by default
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.lr_schedule.type, superoffload::config::LrScheduleType::cosine);
  EXPECT_EQ(c.lr_schedule.warmup_num_steps, 100);
  EXPECT_EQ(c.lr_schedule.warmup_type, superoffload::config::WarmupType::log);  // DeepSpeed's default curve
  EXPECT_DOUBLE_EQ(c.lr_schedule.warmup_min_lr, 0.1 * 3e-4);                   // warmup_min_ratio × lr
  EXPECT_DOUBLE_EQ(c.lr_schedule.min_lr, 0.01 * 3e-4);                         // cos_min_ratio × lr
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 1'000'000'000);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 10'000);
  auto has = [&](const std::string& text) {
    for (const auto& w : loaded.warnings) {
      if (w.find(text) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("zero_optimization.contiguous_gradients")) << "ignored keys are warned about";
  EXPECT_EQ(c.profile.step, 0) << "flops_profiler disabled: no profile";
  EXPECT_TRUE(has("scheduler.params.total_num_steps"));
}

// HF Trainer's documented ZeRO-3 + offload shape, "auto" everywhere it writes it.
TEST(DeepSpeedImport, HfTrainerAutoValuesAreResolved) {
  const std::string model = std::string(SUPEROFFLOAD_SOURCE_DIR) + "/configs/models/tiny-llama";  // hidden_size 384
  auto loaded = so::config::load_config(
      ConfigSources{std::nullopt, kData + "hf_trainer_zero3_offload.json",
                    {"model.path=" + model, "data.path=/d.jsonl", "training.train_micro_batch_size_per_gpu=4",
                     "optimizer.lr=2e-5"}},
      2);
  const auto& c = loaded.config;
  EXPECT_EQ(c.zero.reduce_bucket_size, 384 * 384);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, static_cast<int64_t>(0.9 * 384 * 384));
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 10 * 384);
  EXPECT_EQ(c.training.train_micro_batch_size_per_gpu, 4);  // from --set
  EXPECT_EQ(c.training.train_batch_size, 8);                // derived for 2 ranks
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 2e-5);                   // from --set
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.01);         // superoffload's default
  EXPECT_DOUBLE_EQ(c.training.gradient_clipping, 1.0);
  EXPECT_EQ(c.lr_schedule.type, superoffload::config::LrScheduleType::constant);  // WarmupLR
  EXPECT_EQ(c.logging.steps_per_print, 2000);
  EXPECT_EQ(c.logging.log_every_steps, 1);
  auto noted = [&](const std::string& text) {
    for (const auto& n : loaded.notes) {
      if (n.find(text) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(noted("reduce_bucket_size = \"auto\": [zero] reduce_bucket_size = 147456, hidden_size² with hidden_size 384"));
  EXPECT_TRUE(noted("train_micro_batch_size_per_gpu = \"auto\": [training] train_micro_batch_size_per_gpu = 4 from --set"));
  EXPECT_TRUE(noted("fp16.enabled = \"auto\": fp16 stays off"));
  EXPECT_TRUE(noted("[lr_schedule] type = \"constant\"")) << "differences from superoffload alone are noted";
  for (const auto& w : loaded.warnings) EXPECT_EQ(w.find("auto"), std::string::npos) << w;
  EXPECT_EQ(loaded.origins.at("zero.reduce_bucket_size"),
            kData + "hf_trainer_zero3_offload.json: zero_optimization.reduce_bucket_size = \"auto\" → hidden_size² "
                    "(HF Trainer's rule)");
}

TEST(DeepSpeedImport, AutoBucketSizesNeedTheModelsConfig) {
  const auto message = error_of(ConfigSources{std::nullopt, kData + "hf_trainer_zero3_offload.json", kRequired});
  EXPECT_NE(message.find("reduce_bucket_size = \"auto\" is derived from the model's hidden_size, but /m/config.json "
                         "cannot be read"),
            std::string::npos)
      << message;
}

// Where a key is absent the run means what it means in DeepSpeed, not superoffload's default.
TEST(DeepSpeedImport, AbsentKeysTakeDeepSpeedsDefaults) {
  // No scheduler: constant lr (superoffload alone would decay it on a cosine). An optimizer
  // block without lr or weight_decay: DeepSpeed's Adam defaults 1e-3 and 0.
  auto path = write_temp("bare.json", R"({"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {}}})");
  auto loaded = so::config::load_config(ConfigSources{std::nullopt, path, kRequired}, 1);
  EXPECT_EQ(loaded.config.lr_schedule.type, superoffload::config::LrScheduleType::constant);
  EXPECT_EQ(loaded.config.lr_schedule.warmup_num_steps, 0);
  EXPECT_DOUBLE_EQ(loaded.config.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(loaded.config.optimizer.weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(loaded.config.training.gradient_clipping, 1.0);
  EXPECT_NE(loaded.origins.at("lr_schedule.type").find("keeps the learning rate constant"), std::string::npos);
  bool noted = false;
  for (const auto& n : loaded.notes) noted |= n.find("[lr_schedule] type = \"constant\"") != std::string::npos;
  EXPECT_TRUE(noted);
  std::filesystem::remove(path);
  // WarmupDecayLR without warmup_max_lr peaks at 0.001 and decays to 0, over DeepSpeed's
  // default 1000 log-curve warm-up steps; a TOML lr after the JSON still wins.
  path = write_temp("decay.json", R"({"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 5e-5}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 5000}}})");
  loaded = so::config::load_config(ConfigSources{std::nullopt, path, kRequired}, 1);
  EXPECT_EQ(loaded.config.lr_schedule.type, superoffload::config::LrScheduleType::linear);
  EXPECT_DOUBLE_EQ(loaded.config.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(loaded.config.lr_schedule.min_lr, 0.0);
  EXPECT_EQ(loaded.config.lr_schedule.warmup_num_steps, 1000);
  EXPECT_EQ(loaded.config.lr_schedule.warmup_type, superoffload::config::WarmupType::log);
  std::filesystem::remove(path);
  // No optimizer block: DeepSpeed would take the script's optimizer; ours stays, with a note.
  path = write_temp("no_optimizer.json", R"({"train_batch_size": 4})");
  loaded = so::config::load_config(ConfigSources{std::nullopt, path, kRequired}, 1);
  EXPECT_DOUBLE_EQ(loaded.config.optimizer.lr, 1e-5);
  noted = false;
  for (const auto& n : loaded.notes) noted |= n.find("no \"optimizer\" block") != std::string::npos;
  EXPECT_TRUE(noted);
  std::filesystem::remove(path);
}

TEST(DeepSpeedImport, LrRangeTestImportsWithDeepSpeedsNames) {
  auto path = write_temp("range.json", R"({"train_batch_size": 4, "scheduler": {"type": "LRRangeTest",
    "params": {"lr_range_test_min_lr": 1e-5, "lr_range_test_step_size": 10, "lr_range_test_staircase": true}}})");
  auto loaded = so::config::load_config(ConfigSources{std::nullopt, path, kRequired}, 1);
  const auto& s = loaded.config.lr_schedule;
  EXPECT_EQ(s.type, superoffload::config::LrScheduleType::lr_range_test);
  EXPECT_DOUBLE_EQ(s.lr_range_test_min_lr, 1e-5);
  EXPECT_EQ(s.lr_range_test_step_size, 10);
  EXPECT_DOUBLE_EQ(s.lr_range_test_step_rate, 1.0);  // DeepSpeed's default
  EXPECT_TRUE(s.lr_range_test_staircase);
  EXPECT_EQ(s.warmup_num_steps, 0);
  std::filesystem::remove(path);
  // A warm-up set beside a range test (a config whose schedule type alone was switched) is
  // ignored with a warning, not refused.
  const auto switched = so::config::load_config(ConfigSources{
      std::nullopt, std::nullopt, {"model.path=/m", "data.path=/d", "lr_schedule.type=lr_range_test",
                                   "lr_schedule.warmup_num_steps=10"}}, 1);
  std::string warnings;
  for (const auto& w : switched.warnings) warnings += w + "\n";
  EXPECT_NE(warnings.find("[lr_schedule] warmup_num_steps (--set lr_schedule.warmup_num_steps=10) has no effect: "
                          "the LR range test has no warm-up"),
            std::string::npos) << warnings;
}

TEST(DeepSpeedImport, FlopsProfilerImportsAsTheProfile) {
  auto path = write_temp("profiler.json", R"({"train_batch_size": 4, "flops_profiler": {"enabled": true,
    "profile_step": 3, "module_depth": -1, "top_modules": 5, "detailed": true, "output_file": "/tmp/p.txt"}})");
  auto loaded = so::config::load_config(ConfigSources{std::nullopt, path, kRequired}, 1);
  EXPECT_EQ(loaded.config.profile.step, 3);
  EXPECT_EQ(loaded.config.profile.top_layers, 5);
  EXPECT_EQ(loaded.config.profile.output_file, "/tmp/p.txt");
  bool noted = false;
  for (const auto& n : loaded.notes) noted |= n.find("flops_profiler.module_depth = -1: the profile is per layer") != std::string::npos;
  EXPECT_TRUE(noted);
  for (const auto& w : loaded.warnings) EXPECT_EQ(w.find("flops_profiler"), std::string::npos) << w;
  std::filesystem::remove(path);
  path = write_temp("profiler_default.json", R"({"train_batch_size": 4, "flops_profiler": {"enabled": true}})");
  EXPECT_EQ(so::config::load_config(ConfigSources{std::nullopt, path, kRequired}, 1).config.profile.step, 1);
  std::filesystem::remove(path);
}

TEST(DeepSpeedImport, AdamWithoutDecoupledDecayIsAdam) {
  auto path = write_temp("adam.json", R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})");
  auto loaded = so::config::load_config(ConfigSources{std::nullopt, path, kRequired}, 1);
  EXPECT_EQ(loaded.config.optimizer.type, superoffload::config::OptimizerType::adam);
  std::filesystem::remove(path);
}

TEST(DeepSpeedImport, UnsupportedSettingsAreErrors) {
  auto path = write_temp("bad.json", R"({"fp16": {"enabled": true}, "optimizer": {"type": "Lamb"},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})");
  const auto message = error_of(ConfigSources{std::nullopt, path, kRequired});
  EXPECT_NE(message.find("fp16 training is not supported"), std::string::npos) << message;
  EXPECT_NE(message.find("\"Lamb\" is not supported"), std::string::npos) << message;
  EXPECT_NE(message.find("[zero] stage = 2"), std::string::npos) << message;
  std::filesystem::remove(path);
}

TEST(DeepSpeedImport, NvmeOffloadImports) {
  auto path = write_temp("nvme.json", R"({"train_batch_size": 4, "bf16": {"enabled": true},
    "zero_optimization": {"stage": 3, "sub_group_size": 100000000,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 6, "pin_memory": true}}})");
  auto loaded = so::config::load_config(ConfigSources{std::nullopt, path, kRequired}, 1);
  EXPECT_EQ(loaded.config.offload.device, superoffload::config::OffloadDevice::nvme);
  EXPECT_EQ(loaded.config.offload.nvme_path, "/local_nvme");
  EXPECT_EQ(loaded.config.offload.buffer_count, 6);
  EXPECT_TRUE(loaded.config.offload.pin_memory);
  EXPECT_EQ(loaded.origins.at("offload.nvme_path"), path.string() + ": zero_optimization.offload_optimizer.nvme_path");
  std::filesystem::remove(path);
  // Without nvme_path the device is refused, naming both.
  path = write_temp("nvme_no_path.json", R"({"train_batch_size": 4,
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}})");
  const auto message = error_of(ConfigSources{std::nullopt, path, kRequired});
  EXPECT_NE(message.find("[offload] device = \"nvme\""), std::string::npos) << message;
  EXPECT_NE(message.find("needs nvme_path"), std::string::npos) << message;
  std::filesystem::remove(path);
}

TEST(DeepSpeedImport, CpuCheckpointingIsActivationOffload) {
  auto path = write_temp("ds_activations.json", R"({"train_batch_size": 4,
    "activation_checkpointing": {"partition_activations": true, "cpu_checkpointing": true,
      "contiguous_memory_optimization": false}})");
  auto loaded = so::config::load_config(ConfigSources{std::nullopt, path, kRequired}, 1);
  EXPECT_EQ(loaded.config.model.activation_offload, superoffload::config::ActivationOffload::host);
  EXPECT_TRUE(loaded.config.training.activation_checkpointing);
  EXPECT_EQ(loaded.origins.at("model.activation_offload"), path.string() + ": activation_checkpointing.cpu_checkpointing");
  bool warned = false;  // Megatron's partitioned activations have no equivalent: said, not dropped
  for (const auto& w : loaded.warnings) {
    EXPECT_EQ(w.find("cpu_checkpointing"), std::string::npos) << w;
    warned |= w.find("activation_checkpointing.partition_activations") != std::string::npos;
  }
  EXPECT_TRUE(warned);
  std::filesystem::remove(path);
  path = write_temp("ds_activations_bad.json", R"({"activation_checkpointing": {"cpu_checkpointing": "yes"}})");
  const auto message = error_of(ConfigSources{std::nullopt, path, kRequired});
  EXPECT_NE(message.find("activation_checkpointing.cpu_checkpointing: must be true or false"), std::string::npos) << message;
  std::filesystem::remove(path);
}

// DeepSpeed ALST's top-level sequence_parallel_size is [parallel]'s; the batch-size rules then
// count world / that many data-parallel replicas, and a size that does not divide the world or
// seq_len is refused naming both numbers.
TEST(DeepSpeedImport, SequenceParallelSizeIsUlysses) {
  auto path = write_temp("ds_ulysses.json", R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
    "sequence_parallel_size": 4})");
  auto loaded = so::config::load_config(ConfigSources{std::nullopt, path, kRequired}, 8);
  EXPECT_EQ(loaded.config.parallel.sequence_parallel_size, 4);
  EXPECT_EQ(loaded.origins.at("parallel.sequence_parallel_size"), path.string() + ": sequence_parallel_size");
  EXPECT_EQ(loaded.config.training.train_batch_size, 1 * 2 * (8 / 4));  // two replicas of four ranks
  auto message = error_of(ConfigSources{std::nullopt, path, kRequired}, 6);
  EXPECT_NE(message.find("sequence_parallel_size = 4"), std::string::npos) << message;
  EXPECT_NE(message.find("does not divide the world size 6"), std::string::npos) << message;
  std::filesystem::remove(path);
  path = write_temp("ds_ulysses_seq.json", R"({"train_batch_size": 2, "sequence_parallel_size": 3})");
  message = error_of(ConfigSources{std::nullopt, path, kRequired}, 3);
  EXPECT_NE(message.find("does not divide [data] seq_len = 4096"), std::string::npos) << message;
  std::filesystem::remove(path);
}

TEST(DeepSpeedImport, InvalidJsonNamesLineAndColumn) {
  auto path = write_temp("broken.json", "{\n  \"train_batch_size\": 4,\n  \"bf16\": {\"enabled\": tru}\n}\n");
  const auto message = error_of(ConfigSources{std::nullopt, path, kRequired});
  EXPECT_NE(message.find(path.string() + ":3:"), std::string::npos) << message;
  EXPECT_NE(message.find("invalid JSON"), std::string::npos) << message;
  std::filesystem::remove(path);
}

TEST(DeepSpeedImport, TomlFileOverridesTheDeepSpeedConfig) {
  auto toml = write_temp("over.toml", "[offload]\nratio = 0.5\n");
  auto loaded = so::config::load_config(ConfigSources{toml, kData + "superoffload_mode.json", kRequired}, 1);
  EXPECT_DOUBLE_EQ(loaded.config.offload.ratio, 0.5);
  EXPECT_EQ(loaded.config.zero.sub_group_size, 800'000'000);
  std::filesystem::remove(toml);
}

}  // namespace
