// The configuration schema. Adding a key: add the member to config.hpp, one line here, then
// regenerate configs/reference.toml with `superoffload config --reference`.
#include "config/schema.hpp"

#include <cmath>
#include <sstream>
#include <type_traits>

#include "base/error.hpp"

namespace superoffload::config {
namespace {

template <class T>
constexpr Kind kind_of() {
  if constexpr (std::is_enum_v<T>) return Kind::string;  // a choice, written as its text
  else if constexpr (std::is_same_v<T, bool>) return Kind::boolean;
  else if constexpr (std::is_same_v<T, std::int64_t>) return Kind::integer;
  else if constexpr (std::is_same_v<T, double>) return Kind::number;
  else if constexpr (std::is_same_v<T, std::string>) return Kind::string;
  else if constexpr (std::is_same_v<T, std::vector<double>>) return Kind::number_list;
  else static_assert(sizeof(T) == 0, "unsupported configuration field type");
}

// Adds fields of one component struct S (reached through Config::*member).
template <class S>
class SectionBuilder {
 public:
  SectionBuilder(std::vector<Section>& all, std::string name, std::string doc, S Config::*member)
      : all_(all), member_(member) {
    all_.push_back(Section{std::move(name), std::move(doc), {}});
  }

  template <class T>
  Field& add(std::string key, T S::*field, std::string doc) {
    Section& section = all_.back();
    Field f;
    f.section = section.name;
    f.key = std::move(key);
    f.doc = std::move(doc);
    f.kind = kind_of<T>();
    if constexpr (std::is_enum_v<T>) {
      // Parsed here, once: the loader has checked the text against `choices` before set().
      for (const auto& choice : choices<T>()) f.choices.emplace_back(choice.text);
      f.get = [member = member_, field](const Config& c) -> Value { return std::string(to_text((c.*member).*field)); };
      f.set = [member = member_, field, name = f.section + "." + f.key](Config& c, const Value& v) {
        SO_CHECK(from_text(std::get<std::string>(v), (c.*member).*field),
                 "[" << name << "]: \"" << std::get<std::string>(v) << "\" is not one of its values");
      };
    } else {
      f.get = [member = member_, field](const Config& c) -> Value { return (c.*member).*field; };
      f.set = [member = member_, field](Config& c, const Value& v) { (c.*member).*field = std::get<T>(v); };
    }
    section.fields.push_back(std::move(f));
    return section.fields.back();
  }

 private:
  std::vector<Section>& all_;
  S Config::*member_;
};

std::vector<Section> build_schema() {
  std::vector<Section> s;
  {
    SectionBuilder<ModelConfig> b(s, "model", "The model: a HuggingFace directory and the plugin that builds it.", &Config::model);
    b.add("path", &ModelConfig::path,
          "HuggingFace model directory (config.json, *.safetensors, tokenizer files).")
        .require("\"/path/to/hf-model\"");
    b.add("plugin", &ModelConfig::plugin,
          "\"auto\" (chosen by config.json's architectures), a plugin name, or a path to a plugin .so.");
    b.add("init", &ModelConfig::init,
          "\"auto\": load safetensors weights if present, else random; \"pretrained\": require weights; \"random\": "
          "initialise from initializer_range.");
    b.add("allow_non_finite_weights", &ModelConfig::allow_non_finite_weights,
          "Load safetensors weights that hold NaN or inf. By default such weights are refused, naming the tensor "
          "and the count: they give a non-finite loss from the first step.");
    b.add("activation_offload", &ModelConfig::activation_offload,
          "\"host\": each layer's checkpointed input is copied to pinned host memory during forward and brought "
          "back one layer ahead of its recompute in backward, on a copy stream beside the computation (DeepSpeed's "
          "activation_checkpointing.cpu_checkpointing); the device then holds two layers' inputs instead of all. "
          "Needs [training] activation_checkpointing. \"none\": the inputs stay on the device.");
    b.add("tile_tokens", &ModelConfig::tile_tokens,
          "Run each MLP (dense and experts) over tiles of this many tokens of a micro-batch, forward and in "
          "backward's recompute, so its tokens x intermediate tensors never exist whole (ALST's TiledMLP); costs one "
          "more MLP forward per step. 0: chosen by the plan (tiles of hidden_size tokens once a micro-batch holds "
          "32,768 tokens or more, else untiled); -1: never.")
        .at_least(-1);
  }
  {
    SectionBuilder<DataConfig> b(s, "data", "Training data and how it becomes token sequences.", &Config::data);
    b.add("path", &DataConfig::path, "Dataset file: pre-tokenized HDF5 (.h5) or JSONL.")
        .require("\"/path/to/dataset.jsonl\"");
    b.add("format", &DataConfig::format,
          "\"auto\" (from the extension and first record), \"hdf5\", \"jsonl\" (a text field), \"alpaca\" "
          "(instruction/input/output records) or \"chat\" (messages or ShareGPT conversations records, rendered with "
          "the model's chat template).");
    b.add("seq_len", &DataConfig::seq_len, "Tokens per sample.").at_least(1);
    b.add("tokenizer", &DataConfig::tokenizer, "Tokenizer directory or file; empty: the model directory's.");
    b.add("prompt_template", &DataConfig::prompt_template,
          "Prompt for instruction records with an input; {instruction} and {input} are replaced. Prompt tokens "
          "carry no loss.");
    b.add("prompt_template_no_input", &DataConfig::prompt_template_no_input,
          "Prompt for instruction records without an input.");
    b.add("chat_template", &DataConfig::chat_template,
          "Chat records: a Jinja chat template file to render them with; empty: the model's own (chat_template.jinja, "
          "or tokenizer_config.json's chat_template).");
    b.add("train_on", &DataConfig::train_on,
          "Chat records: \"assistant\" (only the assistant's turns carry loss, from the template's {% generation %} "
          "blocks or else each turn's rendering; TRL's assistant_only_loss) or \"all\" (every token).");
    b.add("packing", &DataConfig::packing,
          "Pack several instruction samples into one sequence instead of padding each.");
    b.add("attention", &DataConfig::attention,
          "What a token attends to: \"document\" (only its own sample or document, positions restarting at "
          "each, as HF's padding-free packing), \"causal\" (everything before it in the sequence) or \"auto\" "
          "(document for instruction samples, causal for a plain-text stream).");
    b.add("shuffle", &DataConfig::shuffle, "Shuffle samples each epoch (deterministic from training.seed).");
    b.add("eval_path", &DataConfig::eval_path,
          "Validation data for [training] eval_every_steps: a file in any format `path` takes, tokenized and cut into "
          "samples the same way (format, seq_len, templates, packing, attention); empty: none, or eval_fraction.");
    b.add("eval_fraction", &DataConfig::eval_fraction,
          "Hold out this share of `path`'s samples (rows, or seq_len-token pieces of a stream) as validation data, "
          "never trained on: the same samples at any world size, chosen from [training] seed (HF's train_test_split "
          "test_size, rounded up); 0: none. At most 0.5; not together with eval_path.")
        .range(0, 0.5);
  }
  {
    SectionBuilder<TrainingConfig> b(s, "training", "The step loop. Batch keys follow DeepSpeed.", &Config::training);
    b.add("output_dir", &TrainingConfig::output_dir, "Directory for logs, metrics.h5 and checkpoints.");
    b.add("train_batch_size", &TrainingConfig::train_batch_size,
          "Global batch in samples = micro-batch x accumulation x world size; 0: derived from the other two.")
        .at_least(0);
    b.add("train_micro_batch_size_per_gpu", &TrainingConfig::train_micro_batch_size_per_gpu,
          "Samples per rank per forward/backward; 0: derived (1 if nothing is set).")
        .at_least(0);
    b.add("gradient_accumulation_steps", &TrainingConfig::gradient_accumulation_steps,
          "Micro-batches accumulated per optimizer step; 0: derived (1 if nothing is set).")
        .at_least(0);
    b.add("gradient_clipping", &TrainingConfig::gradient_clipping,
          "Clip the global gradient norm to this value; 0 disables clipping (and its validation).")
        .at_least(0);
    b.add("max_steps", &TrainingConfig::max_steps, "Optimizer steps to run; 0: run `epochs` epochs.").at_least(0);
    b.add("epochs", &TrainingConfig::epochs, "Epochs to run when max_steps is 0.").at_least(0);
    b.add("timing_warmup_steps", &TrainingConfig::timing_warmup_steps,
          "First steps left out of the timing summary (allocator and cache warm-up); not learning-rate warm-up, "
          "which is [lr_schedule] warmup_num_steps. Formerly warmup_steps.")
        .at_least(0);
    b.add("bench_steps", &TrainingConfig::bench_steps,
          "Stop after timing_warmup_steps + bench_steps steps and print the timing summary; 0: off.")
        .at_least(0);
    b.add("seed", &TrainingConfig::seed,
          "Seed for initialisation and shuffling. Dropout is not implemented: a config.json that sets one "
          "trains without it, with a warning.")
        .at_least(0);
    b.add("activation_checkpointing", &TrainingConfig::activation_checkpointing,
          "Keep only each layer's input and recompute in backward; false keeps all activations.");
    b.add("eval_every_steps", &TrainingConfig::eval_every_steps,
          "Evaluate the validation data ([data] eval_path or eval_fraction) every N steps and once at the end; 0: at "
          "the end only. HF Trainer's eval_steps imports here.")
        .at_least(0);
    b.add("eval_max_batches", &TrainingConfig::eval_max_batches,
          "Evaluate only the first N batches of per_device_eval_batch_size samples of the validation data (the same "
          "samples at any world size, spread over the ranks); 0: all of it.")
        .at_least(0);
    b.add("per_device_eval_batch_size", &TrainingConfig::per_device_eval_batch_size,
          "Validation samples per rank per forward (HF Trainer's name); 0: train_micro_batch_size_per_gpu.")
        .at_least(0);
    b.add("eval_on_start", &TrainingConfig::eval_on_start,
          "Also evaluate before the first step (HF Trainer's eval_on_start): the curve's starting point.");
    b.add("early_stopping_patience", &TrainingConfig::early_stopping_patience,
          "Stop after this many evaluations in a row without a new lowest eval loss (HF's EarlyStoppingCallback), "
          "saving a final checkpoint; 0: never. Needs eval_every_steps.")
        .at_least(0);
    b.add("early_stopping_threshold", &TrainingConfig::early_stopping_threshold,
          "early_stopping_patience: an evaluation counts as an improvement only when it lowers the best eval loss "
          "by more than this.")
        .at_least(0);
    b.add("metric_for_best_model", &TrainingConfig::metric_for_best_model,
          "What [checkpoint] keep_best and early stopping compare, lower being better: \"eval_loss\" (HF Trainer's "
          "name; \"loss\" is its shorthand for the same). The eval loss is the only metric computed.");
  }
  {
    SectionBuilder<OptimizerConfig> b(s, "optimizer", "AdamW over fp32 master weights.", &Config::optimizer);
    b.add("type", &OptimizerConfig::type, "\"adamw\" (decoupled weight decay) or \"adam\" (L2 penalty).");
    b.add("lr", &OptimizerConfig::lr, "Peak learning rate.").at_least(0);
    b.add("betas", &OptimizerConfig::betas, "Adam beta1 and beta2, each in [0, 1).").size(2).at_least(0).below(1);
    b.add("eps", &OptimizerConfig::eps, "Adam epsilon.").above(0);
    b.add("weight_decay", &OptimizerConfig::weight_decay,
          "Weight decay, by name as HF Trainer decides it: none for biases (any name containing \"bias\", "
          "whatever its shape) and norm weights (layernorm, rmsnorm, norm, *_norm); every other tensor is "
          "decayed — embeddings, GPT-OSS attention sinks and experts included. `superoffload plan --parameters` "
          "lists each tensor's choice.")
        .at_least(0);
    b.add("max_consecutive_skips", &OptimizerConfig::max_consecutive_skips,
          "Abort after this many consecutive steps skipped for non-finite gradients.")
        .at_least(1);
  }
  {
    SectionBuilder<LrScheduleConfig> b(s, "lr_schedule", "Learning-rate schedule.", &Config::lr_schedule);
    b.add("type", &LrScheduleConfig::type,
          "\"constant\", \"cosine\" or \"linear\" decay to min_lr after the warm-up; \"lr_range_test\": "
          "DeepSpeed's LRRangeTest (lr_range_test_* keys; [optimizer] lr and the warm-up unused).");
    b.add("warmup_num_steps", &LrScheduleConfig::warmup_num_steps, "Steps of learning-rate warm-up.").at_least(0);
    b.add("warmup_type", &LrScheduleConfig::warmup_type, "Warm-up curve, \"linear\" or \"log\" (DeepSpeed WarmupLR).");
    b.add("warmup_min_lr", &LrScheduleConfig::warmup_min_lr, "Learning rate at the start of the warm-up.")
        .at_least(0);
    b.add("min_lr", &LrScheduleConfig::min_lr, "Learning rate at the end of the decay.").at_least(0);
    b.add("lr_range_test_min_lr", &LrScheduleConfig::lr_range_test_min_lr,
          "lr_range_test: the learning rate of the first step.")
        .above(0);
    b.add("lr_range_test_step_size", &LrScheduleConfig::lr_range_test_step_size,
          "lr_range_test: steps per unit of increase: lr = min_lr × (1 + step_rate × step / step_size).")
        .at_least(1);
    b.add("lr_range_test_step_rate", &LrScheduleConfig::lr_range_test_step_rate,
          "lr_range_test: increase per step_size steps, in units of lr_range_test_min_lr.")
        .above(0);
    b.add("lr_range_test_staircase", &LrScheduleConfig::lr_range_test_staircase,
          "lr_range_test: raise the learning rate every step_size steps instead of every step.");
  }
  {
    SectionBuilder<ParallelConfig> b(s, "parallel", "How ranks share the work besides ZeRO's data parallelism.",
                                     &Config::parallel);
    b.add("sequence_parallel_size", &ParallelConfig::sequence_parallel_size,
          "Ulysses sequence parallelism (DeepSpeed ALST's and HF Accelerate's name): each group of this many "
          "consecutive ranks (best within a node) trains the same samples, every rank a contiguous shard of each "
          "row's tokens, and attention trades sequence shards for head shards by all-to-all; activations per rank "
          "shrink by this factor. Must divide the world size, [data] seq_len and the model's attention heads (key/"
          "value heads are replicated when fewer). Data parallelism, and the batch-size rules, use world / this; "
          "ZeRO-3 still partitions over every rank. 1: none.")
        .at_least(1);
  }
  {
    SectionBuilder<MoeConfig> b(s, "moe", "Mixture-of-experts models.", &Config::moe);
    b.add("expert_parallel_size", &MoeConfig::expert_parallel_size,
          "Expert parallelism (DeepSpeed's ep_size, Megatron's --expert-model-parallel-size): each group of this many "
          "consecutive ranks (best within a node) splits the experts of every MoE layer among its ranks, and each "
          "token's hidden state travels to its experts' ranks and back by all-to-all. Expert weights, gradients and "
          "optimizer state are partitioned only across the world / this ranks that hold the same experts, so no rank "
          "gathers an expert it does not compute; attention, routers and norms stay partitioned across every rank. "
          "Must divide the world size and every MoE layer's expert count. Checkpoints resume at any other value. "
          "Ignored by dense models. 1: none.")
        .at_least(1);
  }
  {
    SectionBuilder<ZeroConfig> b(s, "zero", "ZeRO partitioning (DeepSpeed zero_optimization names).", &Config::zero);
    b.add("stage", &ZeroConfig::stage, "ZeRO stage; superoffload implements stage 3.").one_of({"3"});
    b.add("sub_group_size", &ZeroConfig::sub_group_size,
          "Elements per optimizer sub-group: the unit the CPU optimizer steps during backward.")
        .at_least(1);
    b.add("reduce_bucket_size", &ZeroConfig::reduce_bucket_size, "Elements per gradient reduce-scatter bucket (all ranks' slices of it): each layer's "
          "gradient is reduce-scattered in buckets of at most this many elements while backward goes on; two "
          "buckets' fp32 buffers are in flight at most (device memory).")
        .at_least(1);
    b.add("stage3_prefetch_bucket_size", &ZeroConfig::stage3_prefetch_bucket_size,
          "Elements of parameters gathered ahead of the layer that needs them.")
        .at_least(0);
    b.add("stage3_max_live_parameters", &ZeroConfig::stage3_max_live_parameters,
          "Most gathered parameter elements resident per rank at once.")
        .at_least(1);
    b.add("stage3_param_persistence_threshold", &ZeroConfig::stage3_param_persistence_threshold,
          "Layers with fewer elements than this stay gathered for the whole run.")
        .at_least(0);
  }
  {
    SectionBuilder<OffloadConfig> b(s, "offload", "Optimizer offload (DeepSpeed offload_optimizer names).",
                                    &Config::offload);
    b.add("device", &OffloadConfig::device,
          "\"cpu\": optimizer state and step on the host; \"nvme\": stepped on the host, state in files under "
          "nvme_path (ZeRO-Infinity); \"none\": on the device.");
    b.add("pin_memory", &OffloadConfig::pin_memory, "Page-locked host buffers for device transfers (GPU runs).");
    b.add("ratio", &OffloadConfig::ratio,
          "Share of sub-groups stepped on the CPU; the rest (those whose gradients arrive last) on the device.")
        .range(0, 1);
    b.add("super_offload", &OffloadConfig::super_offload,
          "Step sub-groups on the CPU during backward, validated at step end; false: classic ZeRO-Offload.");
    b.add("speculation", &OffloadConfig::speculation,
          "With super_offload: \"auto\" speculates until clipping is certain (this rank's gradient norm so far "
          "exceeds gradient_clipping) or, after a clipped step, predicted from the rank's usual share of the norm; "
          "\"always\" speculates every CPU sub-group; \"never\" is super_offload = false.");
    b.add("cpuadam_cores_perc", &OffloadConfig::cpuadam_cores_perc,
          "Share of the rank's bound cores used by CPU AdamW threads.")
        .range(0, 1)
        .above(0);
    b.add("nvme_path", &OffloadConfig::nvme_path,
          "device = \"nvme\": directory on a node-local drive with O_DIRECT (ext4, xfs) for one state file per "
          "rank, removed at exit.");
    b.add("buffer_count", &OffloadConfig::buffer_count,
          "device = \"nvme\": sub-groups' state held in host memory at once (reads ahead and writes behind the "
          "one being stepped); each buffer holds one sub-group ([zero] sub_group_size).")
        .at_least(2);
    b.add("optimizer_state_dtype", &OffloadConfig::optimizer_state_dtype,
          "Storage of the CPU sub-groups' Adam moments: \"fp32\", or \"bf16\" (stochastically rounded; 20 instead of "
          "28 bytes per parameter per step). Master weights stay fp32.");
  }
  {
    SectionBuilder<PrecisionConfig> b(s, "precision", "Numeric precision.", &Config::precision);
    b.add("bf16", &PrecisionConfig::bf16, "bf16 compute weights (fp32 master weights); false: fp32 everywhere.");
  }
  {
    SectionBuilder<CheckpointConfig> b(s, "checkpoint", "Sharded HDF5 checkpoints under <output_dir>/checkpoints.",
                                       &Config::checkpoint);
    b.add("every_steps", &CheckpointConfig::every_steps, "Save every N steps; 0: only on exit.").at_least(0);
    b.add("keep_last", &CheckpointConfig::keep_last,
          "Complete checkpoints kept; older ones are deleted only after a newer one is complete.")
        .at_least(1);
    b.add("keep_best", &CheckpointConfig::keep_best,
          "Also keep the checkpoint of the lowest eval loss so far, named by checkpoints/best as `latest` names the "
          "newest (saved when an evaluation finds it, if no save falls on that step). `export RUN --checkpoint best` "
          "exports it. HF Trainer's load_best_model_at_end imports here.");
    b.add("save_on_exit", &CheckpointConfig::save_on_exit, "Save at the end of training and on preemption.");
    b.add("auto_resume", &CheckpointConfig::auto_resume, "Resume from checkpoints/latest when it exists.");
    b.add("async_save", &CheckpointConfig::async_save,
          "Periodic saves copy the optimizer state in host memory (training pauses only for the copy) and write "
          "it in the background; needs host memory for one more copy of the state.");
    b.add("accept_changed_settings", &CheckpointConfig::accept_changed_settings,
          "Resume from a checkpoint although [data] path (or the file's size), seq_len, shuffle, packing, attention, "
          "[training] seed or [precision] bf16 changed since it was written, with a warning per change. By default "
          "such a resume is refused: it would continue another run under this one's name.");
    b.add("verify_from_disk", &CheckpointConfig::verify_from_disk,
          "After each rank file's fsync, drop its pages from the page cache and read it back from the drive, so "
          "that the CRC32Cs in DONE are those of the bytes on the device (false: read back from the page cache "
          "while fsync runs, which checks the write path at no cost in bandwidth). Costs a read of every "
          "checkpoint at the drive's speed.");
    b.add("max_failed_saves", &CheckpointConfig::max_failed_saves,
          "Periodic saves in a row that may fail (a full disk, a quota, an I/O error) while training goes on: each "
          "failure is logged as an error naming the step and what 'latest' still holds, and the next save is tried "
          "at the next every_steps. 0: a failed save ends the job (DeepSpeed's and HF Trainer's behaviour). The "
          "save at the end of training or on preemption is never skipped: if it fails, the job ends with an error.")
        .at_least(0);
  }
  {
    SectionBuilder<MetricsConfig> b(s, "metrics", "<output_dir>/metrics.h5, written by rank 0.", &Config::metrics);
    b.add("enabled", &MetricsConfig::enabled, "Write metrics.h5.");
    b.add("flush_every_steps", &MetricsConfig::flush_every_steps, "Flush to disk every N steps (SWMR readers).")
        .at_least(1);
    b.add("wall_clock_breakdown", &MetricsConfig::wall_clock_breakdown,
          "Log the per-phase timers (forward, backward, reduce, optimizer, ...) every step.");
    b.add("tensorboard", &MetricsConfig::tensorboard,
          "Also write TensorBoard event files (DeepSpeed's tensorboard monitor: Train/Samples/train_loss, lr, ... "
          "against samples seen).");
    b.add("csv", &MetricsConfig::csv, "Also write one CSV per series, as DeepSpeed's csv_monitor does.");
    b.add("output_path", &MetricsConfig::output_path,
          "Directory of the TensorBoard and CSV monitors' job folders; empty: [training] output_dir.");
    b.add("job_name", &MetricsConfig::job_name, "The monitors' folder under output_path (DeepSpeed's job_name).");
  }
  {
    SectionBuilder<ProfileConfig> b(s, "profile",
                                    "One step profiled per layer and phase (DeepSpeed's flops_profiler); steps traced with Kineto "
                                    "(torch.profiler's trace).",
                                    &Config::profile);
    b.add("step", &ProfileConfig::step,
          "Profile this step (1-based): per layer and phase (gather, forward, recompute, backward, reduce, optimizer) "
          "the time on every rank, the FLOPs and the achieved TFLOPS, into metrics.h5 /profile; 0: never.")
        .at_least(0);
    b.add("top_layers", &ProfileConfig::top_layers, "Layers printed, the slowest first.").at_least(1);
    b.add("output_file", &ProfileConfig::output_file, "Also write the printed table to this file; empty: none.");
    b.add("trace_steps", &ProfileConfig::trace_steps,
          "Trace these steps (\"3\" or \"3-4\", 1-based) with LibTorch's Kineto profiler: a Chrome/Perfetto trace per "
          "rank in <output_dir>/traces/, and its summary (device-busy fraction, top kernels, idle gaps over 0.5 ms, "
          "host<->device copies, synchronising calls, allocator counts) in the log, metrics.h5 /profile/trace and "
          "`inspect`; empty: none. A single step may be written as an integer (3).")
        .integers_too();
  }
  {
    SectionBuilder<LoggingConfig> b(s, "logging", "Console and per-rank log files.", &Config::logging);
    b.add("level", &LoggingConfig::level, "\"trace\", \"debug\", \"info\", \"warning\" or \"error\" (--log-level).");
    b.add("console", &LoggingConfig::console,
          "\"rank0\": only rank 0 on the console (errors from all); \"all\": every rank.");
    b.add("log_every_steps", &LoggingConfig::log_every_steps, "Print the step line every N steps.").at_least(1);
    b.add("steps_per_print", &LoggingConfig::steps_per_print,
          "Also print DeepSpeed's progress line (step, skipped, lr, mom) every N steps; 0: never. DeepSpeed's "
          "steps_per_print imports here.")
        .at_least(0);
  }
  {
    SectionBuilder<RuntimeConfig> b(s, "runtime", "Devices, communication and process placement.", &Config::runtime);
    b.add("device", &RuntimeConfig::device, "\"auto\" (CUDA when a GPU is visible), \"cpu\" or \"cuda\".");
    b.add("comm_backend", &RuntimeConfig::comm_backend, "\"auto\" (NCCL on CUDA, MPI on CPU), \"mpi\" or \"nccl\".");
    b.add("bind", &RuntimeConfig::bind,
          "\"auto\": bind each rank to its share of the cores near its GPU (a binding asked of the launcher, "
          "e.g. srun --cpu-bind or mpirun --bind-to, is kept; Open MPI's default one-core binding is replaced); "
          "\"none\": no binding.");
    b.add("peak_tflops", &RuntimeConfig::peak_tflops,
          "Peak dense TFLOPS per device for MFU; 0: from the GPU model (H100/GH200 bf16).")
        .at_least(0);
    b.add("collective_timeout_s", &RuntimeConfig::collective_timeout_s,
          "End the job when a rank makes no progress (a step, a collective, a checkpoint save) for this long.")
        .above(0);
    b.add("check_memory", &RuntimeConfig::check_memory,
          "Estimate the memory the run needs before allocating and refuse one that cannot fit this node.");
    b.add("resctrl", &RuntimeConfig::resctrl,
          "Keep the CPU optimizer's cache and memory bandwidth apart from the rest of the rank (Intel RDT, AMD PQoS, "
          "Arm MPAM through Linux resctrl, the README, Cache and memory bandwidth (resctrl)): \"auto\" partitions "
          "where groups can be made or an administrator's prolog prepared them, only monitors where just monitoring groups can be made, and says "
          "why otherwise; \"off\"; \"required\": refuse to start without a partition.");
    b.add("resctrl_optimizer_cache", &RuntimeConfig::resctrl_optimizer_cache,
          "Share of each last-level cache's ways for the optimizer's threads; the rest of the rank gets the other "
          "ways. The optimizer streams its state once per step and reuses nothing a cache could hold.")
        .above(0)
        .below(1);
    b.add("resctrl_optimizer_bandwidth", &RuntimeConfig::resctrl_optimizer_bandwidth,
          "Memory-bandwidth cap of the optimizer's threads as a share of the domain's; 1: uncapped (a cap slows the "
          "optimizer, which is memory bound, to leave bandwidth to the GPU feed; the rest is never capped).")
        .range(0, 1)
        .above(0);
  }
  return s;
}

std::string format_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

const char* describe(Kind kind) {
  switch (kind) {
    case Kind::boolean: return "true or false";
    case Kind::integer: return "an integer";
    case Kind::number: return "a number";
    case Kind::string: return "a string";
    case Kind::number_list: return "an array of numbers";
  }
  return "?";
}

const std::vector<Section>& schema() {
  static const std::vector<Section> instance = build_schema();
  return instance;
}

const Section* find_section(const std::string& name) {
  for (const auto& section : schema()) {
    if (section.name == name) return &section;
  }
  return nullptr;
}

const Field* find_field(const std::string& section, const std::string& key) {
  const Section* s = find_section(section);
  if (!s) return nullptr;
  for (const auto& field : s->fields) {
    if (field.key == key) return &field;
  }
  return nullptr;
}

std::string check_constraints(const Field& field, const Value& value) {
  auto range_text = [&] {
    std::string lo = field.min ? format_number(*field.min) : "-inf";
    std::string hi = field.max ? format_number(*field.max) : "inf";
    return std::string(field.min_exclusive ? "(" : "[") + lo + ", " + hi + (field.max && !field.max_exclusive ? "]" : ")");
  };
  auto in_range = [&](double v) {
    if (!std::isfinite(v)) return false;  // no setting takes NaN or inf (0 is how one is turned off)
    if (field.min && (field.min_exclusive ? v <= *field.min : v < *field.min)) return false;
    if (field.max && (field.max_exclusive ? v >= *field.max : v > *field.max)) return false;
    return true;
  };
  if (const auto* i = std::get_if<std::int64_t>(&value)) {
    if (!field.choices.empty()) {
      for (const auto& c : field.choices) {
        if (c == std::to_string(*i)) return "";
      }
      std::string allowed;
      for (const auto& c : field.choices) allowed += (allowed.empty() ? "" : ", ") + c;
      return "expected one of " + allowed;
    }
    if (!in_range(static_cast<double>(*i))) return "out of range: expected an integer in " + range_text();
  } else if (const auto* d = std::get_if<double>(&value)) {
    if (!in_range(*d)) return "out of range: expected a finite number in " + range_text();
  } else if (const auto* str = std::get_if<std::string>(&value)) {
    if (!field.choices.empty()) {
      for (const auto& c : field.choices) {
        if (c == *str) return "";
      }
      std::string allowed;
      for (const auto& c : field.choices) allowed += (allowed.empty() ? "\"" : ", \"") + c + "\"";
      return "expected one of " + allowed;
    }
  } else if (const auto* list = std::get_if<std::vector<double>>(&value)) {
    if (field.list_size && list->size() != field.list_size) {
      return "expected an array of " + std::to_string(field.list_size) + " numbers, got " +
             std::to_string(list->size());
    }
    for (double v : *list) {
      if (!in_range(v)) return "out of range: each element must be in " + range_text();
    }
  }
  return "";
}

}  // namespace superoffload::config
