// The typed configuration: one struct per component, each field with its default. The
// keys, documentation and constraints of every field are in schema.cpp; the TOML sections
// mirror these structs one to one. Choice-valued fields are enums (config/choices.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/choices.hpp"

namespace superoffload::config {

struct ModelConfig {
  std::string path;             // required: HuggingFace model directory
  std::string plugin = "auto";  // "auto", a plugin name, or a path to a plugin .so
  InitMode init = InitMode::automatic;
  bool allow_non_finite_weights = false;  // load weights holding NaN/inf instead of refusing them
  // "host": checkpointed layer inputs live in (pinned) host memory between forward and recompute.
  ActivationOffload activation_offload = ActivationOffload::none;
  // MLP tiles over a micro-batch's tokens: 0 = chosen by the plan, -1 = never, N = N tokens.
  std::int64_t tile_tokens = 0;
};

struct DataConfig {
  std::string path;  // required: dataset file
  DataFormat format = DataFormat::automatic;
  std::int64_t seq_len = 4096;
  std::string tokenizer;  // empty: the model directory's tokenizer
  // Alpaca-style templates for instruction records; {instruction} and {input} are replaced.
  std::string prompt_template =
      "Below is an instruction that describes a task, paired with an input that provides further context. "
      "Write a response that appropriately completes the request.\n\n"
      "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n";
  std::string prompt_template_no_input =
      "Below is an instruction that describes a task. Write a response that appropriately completes the "
      "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n";
  std::string chat_template;  // chat records: a .jinja file; empty: the model's own
  TrainOn train_on = TrainOn::assistant;  // chat records: the tokens that carry loss
  bool packing = false;
  AttentionScope attention = AttentionScope::automatic;  // auto: document for instruction rows, causal for a stream
  bool shuffle = true;
  // Validation data: a file of its own (any format `path` takes), or a held-out share of `path`.
  std::string eval_path;
  double eval_fraction = 0.0;  // 0: none held out
};

struct TrainingConfig {
  std::string output_dir = "runs/superoffload";
  std::int64_t train_batch_size = 0;                // 0: derived (DeepSpeed rules)
  std::int64_t train_micro_batch_size_per_gpu = 0;  // 0: derived
  std::int64_t gradient_accumulation_steps = 0;     // 0: derived
  double gradient_clipping = 1.0;
  std::int64_t max_steps = 0;
  std::int64_t epochs = 1;
  std::int64_t timing_warmup_steps = 0;
  std::int64_t bench_steps = 0;
  std::int64_t seed = 42;
  bool activation_checkpointing = true;
  // Validation during training (needs [data] eval_path or eval_fraction).
  std::int64_t eval_every_steps = 0;             // 0: only at the end
  std::int64_t eval_max_batches = 0;             // 0: the whole eval set
  std::int64_t per_device_eval_batch_size = 0;   // 0: train_micro_batch_size_per_gpu
  bool eval_on_start = false;                    // also before the first step (HF's eval_on_start)
  std::int64_t early_stopping_patience = 0;      // 0: never stop early
  double early_stopping_threshold = 0.0;         // an improvement must exceed this to reset the patience
  EvalMetric metric_for_best_model = EvalMetric::eval_loss;
};

struct OptimizerConfig {
  OptimizerType type = OptimizerType::adamw;  // adamw: decoupled weight decay; adam: L2
  double lr = 1e-5;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.01;
  std::int64_t max_consecutive_skips = 10;
};

struct LrScheduleConfig {
  LrScheduleType type = LrScheduleType::cosine;
  std::int64_t warmup_num_steps = 0;
  WarmupType warmup_type = WarmupType::linear;
  double warmup_min_lr = 0.0;
  double min_lr = 0.0;
  // type = "lr_range_test" (DeepSpeed's LRRangeTest): lr = lr_range_test_min_lr × (1 +
  // step_rate × step / step_size), with step / step_size rounded down when staircase.
  double lr_range_test_min_lr = 1e-3;
  std::int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

// How ranks share the work besides ZeRO's data parallelism.
struct ParallelConfig {
  // Ulysses: each group of this many consecutive ranks trains the same samples, each rank a
  // contiguous shard of every row's tokens; data parallelism is world / this.
  std::int64_t sequence_parallel_size = 1;
};

// Mixture-of-experts models.
struct MoeConfig {
  // Expert parallelism: each group of this many consecutive ranks splits every MoE layer's
  // experts among its ranks; tokens travel to their experts by all-to-all. Expert weights are
  // partitioned only across the ranks holding the same experts. 1: none.
  std::int64_t expert_parallel_size = 1;
};

struct ZeroConfig {
  std::int64_t stage = 3;
  std::int64_t sub_group_size = 1'000'000'000;
  std::int64_t reduce_bucket_size = 500'000'000;
  std::int64_t stage3_prefetch_bucket_size = 50'000'000;
  std::int64_t stage3_max_live_parameters = 1'000'000'000;
  std::int64_t stage3_param_persistence_threshold = 100'000;
};

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::cpu;
  bool pin_memory = true;
  double ratio = 1.0;
  bool super_offload = true;
  Speculation speculation = Speculation::automatic;
  double cpuadam_cores_perc = 0.8;
  StateDtype optimizer_state_dtype = StateDtype::fp32;
  std::string nvme_path;          // device = "nvme": the directory of the state files
  std::int64_t buffer_count = 4;  // device = "nvme": sub-groups' state held in host memory at once
};

struct PrecisionConfig {
  bool bf16 = true;
};

struct CheckpointConfig {
  std::int64_t every_steps = 0;
  std::int64_t keep_last = 2;
  bool keep_best = false;  // also keep the checkpoint of the lowest eval loss, named by `best`
  bool save_on_exit = true;
  bool auto_resume = true;
  bool async_save = false;
  bool accept_changed_settings = false;  // resume although data, seq_len, seed, shuffle or precision changed
  bool verify_from_disk = false;  // rank files' CRCs read back from the drive, not the page cache
  std::int64_t max_failed_saves = 0;  // periodic saves in a row that may fail before the job ends
};

// One step profiled layer by layer (DeepSpeed's flops_profiler), and steps traced with
// LibTorch's Kineto profiler (torch.profiler's Chrome trace, summarised).
struct ProfileConfig {
  std::int64_t step = 0;        // the 1-based step to profile; 0: none
  std::int64_t top_layers = 10;
  std::string output_file;      // also write the table here
  std::string trace_steps;      // "3" or "3-4" (config/step_range.hpp); empty: none
};

struct MetricsConfig {
  bool enabled = true;
  std::int64_t flush_every_steps = 10;
  bool wall_clock_breakdown = false;
  // DeepSpeed's monitors, written by rank 0 into <output_path or output_dir>/<job_name>/.
  bool tensorboard = false;
  bool csv = false;
  std::string output_path;
  std::string job_name = "superoffload";
};

struct LoggingConfig {
  LogLevel level = LogLevel::info;
  ConsoleMode console = ConsoleMode::rank0;
  std::int64_t log_every_steps = 1;
  std::int64_t steps_per_print = 0;  // DeepSpeed's progress line every N steps; 0: none
};

struct RuntimeConfig {
  DeviceKind device = DeviceKind::automatic;
  CommBackend comm_backend = CommBackend::automatic;
  BindMode bind = BindMode::automatic;
  double peak_tflops = 0.0;           // 0: from the GPU model
  double collective_timeout_s = 600.0;
  bool check_memory = true;
  // Cache and memory-bandwidth partitioning through Linux resctrl (docs/resctrl.md).
  ResctrlMode resctrl = ResctrlMode::automatic;
  double resctrl_optimizer_cache = 0.25;
  double resctrl_optimizer_bandwidth = 1.0;
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  OptimizerConfig optimizer;
  LrScheduleConfig lr_schedule;
  ParallelConfig parallel;
  MoeConfig moe;
  ZeroConfig zero;
  OffloadConfig offload;
  PrecisionConfig precision;
  CheckpointConfig checkpoint;
  MetricsConfig metrics;
  ProfileConfig profile;
  LoggingConfig logging;
  RuntimeConfig runtime;
};

}  // namespace superoffload::config
