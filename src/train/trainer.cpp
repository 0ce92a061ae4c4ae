// The training loop.
#include "train/trainer.hpp"

#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <map>
#include <memory>
#include <numeric>
#include <tuple>
#include <sstream>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "base/startup_timeline.hpp"
#include "base/timer.hpp"
#include "cluster/check_mpi.hpp"
#include "cluster/cpu_bf16.hpp"
#include "cluster/mpi_world.hpp"
#include "cluster/stop_request.hpp"
#include "cluster/watchdog.hpp"
#include "config/toml_writer.hpp"
#include "data/prepare.hpp"
#include "data/sampler.hpp"
#include "data/token_dataset.hpp"
#include "data/tokenizer.hpp"
#include "model/blocks/sequence_parallel_attention.hpp"
#include "model/torch_cuda_backend.hpp"
#include "model_io/load_model.hpp"
#include "optim/offload_optimizer.hpp"
#include "optim/sharded_adamw.hpp"
#include "io/checkpoint_files.hpp"
#include "data/holdout.hpp"
#include "train/build_info.hpp"
#include "train/eval_tracker.hpp"
#include "train/validation.hpp"
#include "train/weights_by_shard.hpp"
#include "train/checkpointing.hpp"
#include "train/cpu_allocations.hpp"
#include "train/device_memory.hpp"
#include "train/lr_schedule.hpp"
#include "train/memory_plan.hpp"
#include "train/cache_partition.hpp"
#include "train/metrics_recorder.hpp"
#include "train/step.hpp"
#include "train/step_log.hpp"
#include "train/step_trace.hpp"
#include "train/trace_summary.hpp"
#include "train/throughput.hpp"
#include "zero/communicator_factory.hpp"
#include "zero/engine.hpp"
#include "zero/trace_scope.hpp"

namespace superoffload::train {

using base::now_s;

namespace {

at::Device choose_device(const config::RuntimeConfig& runtime, const cluster::RankBinding& binding) {
  if (runtime.device == config::DeviceKind::cpu) return at::kCPU;
  if (runtime.device == config::DeviceKind::cuda) {
    SO_CHECK(binding.gpu >= 0, "[runtime] device = \"cuda\" but this rank sees no GPU"
                                   << hint("check --gpus-per-task / CUDA_VISIBLE_DEVICES, or use device = \"auto\""));
  }
  if (binding.gpu < 0) return at::kCPU;
  // The CUDA runtime sees the GPU; LibTorch's CUDA backend was opened at start where the driver
  // loads (model/torch_cuda_backend.hpp).
  const std::string device = runtime.device == config::DeviceKind::cuda ? "cuda" : "auto";
  model::require_torch_cuda_backend("[runtime] device = \"" + device + "\" with GPU " + std::to_string(binding.gpu));
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(binding.gpu));
}

// Pre-tokenized HDF5 as it is; JSONL tokenized now, the work split over the ranks. `path`:
// [data] path, or eval_path (read and tokenized the same way).
data::TokenArrays load_tokens(const config::Config& cfg, const std::string& path, const cluster::MpiWorld& world) {
  config::DataConfig data_config = cfg.data;
  data_config.path = path;
  const auto format = data::resolve_data_format(data_config);
  if (format == config::DataFormat::hdf5) return data::read_token_file(path);
  const auto tokenizer_path = cfg.data.tokenizer.empty() ? cfg.model.path : cfg.data.tokenizer;
  const auto tokenizer = data::load_tokenizer(tokenizer_path);
  data::PrepareStats stats;
  auto arrays = data::prepare_records(data_config, data::record_format(format), *tokenizer, world.world(), stats,
                                      data::tokenizer_directory(tokenizer_path));
  if (world.rank() == 0) {
    SO_LOG(info) << "data: " << stats.records << " " << config::to_text(format) << " records from " << path << ", "
                 << stats.tokens << " tokens (" << tokenizer->kind() << ")"
                 << (format == config::DataFormat::alpaca || format == config::DataFormat::chat
                         ? ", " + std::to_string(stats.rows) + " samples, " +
                                              std::to_string(stats.truncated) + " truncated, " +
                                              std::to_string(stats.dropped) + " dropped (no response left)"
                                        : std::string());
  }
  return arrays;
}

// [data] attention: whether a token attends only within its own sample or document (auto:
// instruction rows do, a plain-text stream does not). Rows that each hold one sample need no
// mask: causal attention is the same there, and faster.
bool attends_within_documents(config::AttentionScope scope, const data::TokenArrays& tokens, bool log) {
  const bool rows = tokens.row_length > 0;
  const bool documents = scope == config::AttentionScope::document || (scope == config::AttentionScope::automatic && rows);
  const bool several = rows ? static_cast<int64_t>(tokens.doc_offsets.size()) > tokens.rows()
                            : tokens.doc_offsets.size() > 1;
  if (log) {
    SO_LOG(info) << "attention: " << (documents ? "document" : "causal") << " ([data] attention = \""
                 << config::to_text(scope) << "\"): "
                 << (!documents   ? "a token attends to every earlier token of its sequence"
                     : several    ? "each sample (or document) attends only to itself, its positions starting at 0"
                     : rows && tokens.doc_offsets.empty()
                         ? "the file records no sample boundaries (written before they were): each row is one sample"
                         : "every sequence holds one sample: causal attention is the same");
  }
  return documents && several;
}

// Refuses, before anything is allocated, a run whose host memory need exceeds what this node
// has, or (on a GPU) whose device memory need exceeds what this rank's GPU has free, with the
// numbers and the settings that would make it fit.
void check_memory_fits(const config::Config& cfg, const cluster::MpiWorld& world, at::Device device, bool resumes) {
  const bool on_gpu = device.is_cuda();
  const auto size = model_size_from_config(cfg.model.path);
  const auto plan = plan_memory(size, cfg, world.size(), on_gpu, resumes);
  const double available = available_host_bytes();
  const double needed = plan.host_total() * world.local_size();
  const auto gpu = device_memory_info(device);
  if (world.rank() == 0) {
    for (const auto& line : describe_plan(size, plan, world.local_size(), gpu ? gpu->total_bytes : 0, available)) {
      SO_LOG(info) << "memory: " << line;
    }
  }
  if (available > 0 && needed > kPlanHeadroom * available) {
    // The smallest world (same ranks per node) that would fit.
    int ranks = world.size();
    while (ranks < (1 << 16) &&
           plan_memory(size, cfg, ranks, on_gpu, resumes).host_total() * world.local_size() > kPlanHeadroom * available) {
      ranks *= 2;
    }
    std::ostringstream message;
    message.precision(3);
    message << "this run needs about " << needed / 1e9 << " GB of host memory on this node (" << world.local_size()
            << " rank(s) x " << plan.host_total() / 1e9 << " GB) and the node has " << available / 1e9
            << " GB available: it would be killed by the out-of-memory killer";
    std::ostringstream fix;
    fix << "run on about " << (ranks + world.local_size() - 1) / world.local_size() << " node(s) of this size ("
        << ranks << " ranks), or lower [training] train_micro_batch_size_per_gpu / [data] seq_len"
        << (on_gpu ? ", or lower [offload] ratio to keep more of the optimizer on the GPUs" : "")
        << "; `superoffload plan` shows the estimate for other shapes ([runtime] check_memory = false skips this check)";
    SO_FAIL(message.str() << hint(fix.str()));
  }
  if (!gpu) return;
  if (const auto refusal = refuse_device_memory(size, cfg, world.size(), device.str(), gpu->free_bytes, gpu->total_bytes)) {
    SO_FAIL(refusal->message << hint(refusal->fix));
  }
}

// With [runtime] check_memory = false the plan is not enforced, but a model whose largest
// layer (materialised whole on one rank) exceeds this node's physical memory cannot be built
// at all: refused with its size instead of failing inside the allocator or the OOM killer.
void check_model_buildable(const config::Config& cfg) {
  const auto size = model_size_from_config(cfg.model.path);
  const double physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  const double layer_bytes = 4.0 * static_cast<double>(size.largest_layer);
  if (physical <= 0 || layer_bytes <= physical) return;
  std::ostringstream message;
  message.precision(3);
  message << cfg.model.path << "/config.json describes a model whose largest layer holds " << size.largest_layer
          << " parameters (" << layer_bytes / 1e9 << " GB in fp32), more than this node's " << physical / 1e9
          << " GB of memory: it cannot be built, even with [runtime] check_memory = false";
  throw Error(message.str(), "check the sizes in config.json", Error::UserInput{});
}

// Tests only (tests/cli/test_long_context.sh): SUPEROFFLOAD_TEST_ACTIVATION_COPY_DELAY_MS
// makes every activation offload copy of a CPU run start that late, so a recompute that did not
// wait for its input would read a buffer not yet written.
std::chrono::milliseconds activation_copy_delay() {
  const char* text = std::getenv("SUPEROFFLOAD_TEST_ACTIVATION_COPY_DELAY_MS");
  return std::chrono::milliseconds(text ? std::max(0, std::atoi(text)) : 0);
}

// [parallel] sequence_parallel_size > 1: the groups and their communicators, after checking
// that the model's heads divide among them (a clear error at start-up, not at the first
// attention); null without sequence parallelism.
std::unique_ptr<zero::SequenceParallel> make_sequence_parallel(const config::Config& cfg, const model::HfConfig& model,
                                                               const cluster::MpiWorld& world, at::Device device) {
  const int64_t size = cfg.parallel.sequence_parallel_size;
  if (size <= 1) return nullptr;
  const int64_t heads = model.has("num_attention_heads") ? model.integer("num_attention_heads") : model.integer("n_head");
  const int64_t kv_heads = model.integer("num_key_value_heads", heads);
  if (const auto problem = model::sequence_parallel_heads_problem(heads, kv_heads, size); !problem.empty()) {
    throw Error(model.path() + ": " + problem + " ([parallel] sequence_parallel_size = " + std::to_string(size) + ")",
                "choose a sequence_parallel_size that divides num_attention_heads = " + std::to_string(heads),
                Error::UserInput{});
  }
  auto group = std::make_unique<zero::SequenceParallel>(world.world(), static_cast<int>(size), cfg.runtime.comm_backend,
                                                        device);
  if (world.rank() == 0) {
    SO_LOG(info) << "sequence parallelism (Ulysses): " << world.size() / size << " group(s) of " << size
                 << " consecutive ranks, each rank " << cfg.data.seq_len / size << " of every row's " << cfg.data.seq_len
                 << " tokens; attention all-to-all over " << heads << " heads (" << heads / size << " per rank), "
                 << kv_heads << " key/value heads"
                 << (kv_heads % size != 0 ? " (each replicated for " + std::to_string(size / kv_heads) + " ranks)" : "");
  }
  return group;
}

// [moe] expert_parallel_size > 1 on a mixture-of-experts model: the groups and their
// communicators; null otherwise (a dense model ignores the setting, and says so).
std::unique_ptr<zero::ExpertParallel> make_expert_parallel(const config::Config& cfg, const model::CausalLM& model,
                                                           const cluster::MpiWorld& world, at::Device device) {
  const int64_t size = cfg.moe.expert_parallel_size;
  if (size <= 1) return nullptr;
  // Whether the experts divide among the group is checked by the engine, layer by layer.
  int64_t experts = 0;
  for (const auto& layer : model.layers()) experts = std::max(experts, layer->expert_count());
  if (experts == 0) {
    if (world.rank() == 0) {
      SO_LOG(warning) << "[moe] expert_parallel_size = " << size << " is ignored: the model has no mixture-of-experts layer";
    }
    return nullptr;
  }
  auto group = std::make_unique<zero::ExpertParallel>(world.world(), static_cast<int>(size), cfg.runtime.comm_backend,
                                                      device);
  if (world.rank() == 0) {
    SO_LOG(info) << "expert parallelism: " << world.size() / size << " group(s) of " << size
                 << " consecutive ranks, each rank computing " << experts / size << " of the " << experts
                 << " experts of every MoE layer (tokens exchanged by all-to-all); expert weights partitioned across the "
                 << world.size() / size << " rank(s) that hold the same experts, the rest across all " << world.size();
  }
  return group;
}

zero::EngineOptions engine_options(const config::Config& cfg, at::Device device, int64_t hidden,
                                   const zero::SequenceParallel* sequence_parallel,
                                   const zero::ExpertParallel* expert_parallel) {
  return {.compute_dtype = cfg.precision.bf16 ? at::kBFloat16 : at::kFloat,
          .device = device,
          .activation_checkpointing = cfg.training.activation_checkpointing,
          .activation_offload = cfg.model.activation_offload == config::ActivationOffload::host,
          .pin_activations = cfg.offload.pin_memory,
          .activation_copy_delay = activation_copy_delay(),
          .max_live_parameters = cfg.zero.stage3_max_live_parameters,
          .prefetch_bucket_size = cfg.zero.stage3_prefetch_bucket_size,
          .persistence_threshold = cfg.zero.stage3_param_persistence_threshold,
          .reduce_bucket_size = cfg.zero.reduce_bucket_size,
          .tile_tokens = mlp_tile_tokens(cfg, hidden),
          .sequence_parallel = sequence_parallel,
          .expert_parallel = expert_parallel};
}

// [offload] speculation as the optimizer takes it; super_offload = false speculates nothing.
optim::Speculation speculation_of(const config::OffloadConfig& offload) {
  if (!offload.super_offload) return optim::Speculation::never;
  switch (offload.speculation) {
    case config::Speculation::always:
      return optim::Speculation::always;
    case config::Speculation::never:
      return optim::Speculation::never;
    case config::Speculation::automatic:
      break;
  }
  return optim::Speculation::automatic;
}

// [offload] device = "cpu" or "nvme" (its state in files): the SuperOffload optimizer (speculation per [offload] speculation;
// none without super_offload), on
// cpuadam_cores_perc of the rank's bound cores; "none": AdamW over the shards on the device.
std::unique_ptr<optim::Optimizer> make_optimizer(const config::Config& cfg, zero::ZeroEngine& engine,
                                                 const cluster::RankBinding& binding) {
  const optim::AdamWSettings adamw{.beta1 = cfg.optimizer.betas[0],
                                   .beta2 = cfg.optimizer.betas[1],
                                   .eps = cfg.optimizer.eps,
                                   .weight_decay = cfg.optimizer.weight_decay,
                                   .decoupled = cfg.optimizer.type == config::OptimizerType::adamw,
                                   .gradient_clipping = cfg.training.gradient_clipping};
  if (cfg.offload.device == config::OffloadDevice::none) return std::make_unique<optim::ShardedAdamW>(engine, adamw);
  // cpuadam_cores_perc of the bound cores, one thread per core (cluster::optimizer_cpus).
  const auto& per_core = binding.core_cpus.empty() ? binding.cpus.cpus() : binding.core_cpus;
  const auto optimizer_cpus = cluster::optimizer_cpus(per_core, cfg.offload.cpuadam_cores_perc);
  const auto count = std::max<size_t>(1, optimizer_cpus.size());
  optim::OffloadSettings s{.adamw = adamw,
                           .sub_group_size = cfg.zero.sub_group_size,
                           .ratio = cfg.offload.ratio,
                           .speculation = speculation_of(cfg.offload),
                           .threads = count,
                           .pin_memory = cfg.offload.pin_memory,
                           .bf16_moments = cfg.offload.optimizer_state_dtype == config::StateDtype::bf16};
  if (cfg.offload.device == config::OffloadDevice::nvme) {
    s.nvme_path = cfg.offload.nvme_path;
    s.buffer_count = static_cast<size_t>(cfg.offload.buffer_count);
  }
  // The first ones of the binding; unbound ranks leave placement to the OS.
  if (binding.source != cluster::BindingSource::none) s.cpus = optimizer_cpus;
  return std::make_unique<optim::OffloadOptimizer>(engine, std::move(s));
}

// Provenance stored with the metrics: config, hosts, binding table, versions, revision.
std::map<std::string, std::string> run_attributes(const config::Config& cfg, const cluster::MpiWorld& world,
                                                  const std::vector<std::string>& binding_table, at::Device device,
                                                  bool resumes) {
  std::string hosts, versions, binding;
  for (const auto& host : cluster::MpiWorld::allgather(world.host(), world.world())) hosts += host + "\n";
  for (const auto& [name, version] : train::software_versions()) versions += name + " " + version + "\n";
  for (const auto& line : binding_table) binding += line + "\n";
  std::map<std::string, std::string> attributes{{"config", config::to_toml(cfg)},
                                                {"world_size", std::to_string(world.size())},
                                                {"model", cfg.model.path},
                                                {"git_revision", train::git_revision()},
                                                {"hosts", hosts},
                                                {"versions", versions},
                                                {"binding", binding}};
  // What /ranks/host_peak_rss_bytes is compared with: the plan's host bytes per rank.
  attributes["planned_host_bytes"] = std::to_string(static_cast<int64_t>(
      plan_memory(model_size_from_config(cfg.model.path), cfg, world.size(), device.is_cuda(), resumes).host_total()));
  // What /train/device_peak_bytes is compared with: the plan's device bytes per rank, without
  // the runtime's share (which the caching allocator does not see). On the CPU the same terms,
  // against LibTorch's counted CPU allocations.
  const auto plan = plan_memory(model_size_from_config(cfg.model.path), cfg, world.size(), device.is_cuda());
  attributes["planned_device_bytes"] = std::to_string(static_cast<int64_t>(plan.device_total() - plan.device_runtime_bytes));
  return attributes;
}

// The layers' names in the profile: their Hugging Face modules ("model.layers.3"). The
// embedding's and the head's prefixes ("model.", "") name no module: they are named by their
// first and last parameter's ("model.embed_tokens", "lm_head").
std::vector<std::string> layer_names(std::vector<zero::PartitionedLayer>& layers) {
  std::vector<std::string> names;
  for (size_t l = 0; l < layers.size(); ++l) {
    std::string prefix = layers[l].layer().hf_prefix();
    if (!prefix.empty() && prefix.back() == '.') prefix.pop_back();
    const auto& parameters = layers[l].layout().parameters();
    if (prefix.find('.') != std::string::npos || parameters.empty()) {
      names.push_back(prefix.empty() ? "layer " + std::to_string(l) : prefix);
      continue;
    }
    const std::string& name = l + 1 == layers.size() ? parameters.back().name : parameters.front().name;
    names.push_back(name.substr(0, name.rfind('.')));
  }
  return names;
}

// [profile] step: every rank's layer times gathered on rank 0, which writes them to metrics.h5
// and logs (and, with output_file, writes) the table. Collective.
void report_layer_profile(const config::Config& cfg, const cluster::MpiWorld& world, zero::ZeroEngine& engine,
                          const optim::Optimizer& optimizer, const zero::LayerProfiler& profiler,
                          const model::ModelShape& shape, int64_t step, MetricsRecorder& metrics) {
  const auto engine_s = profiler.seconds();
  const auto optimizer_s = optimizer.layer_seconds();
  const size_t n = engine_s.size();
  std::vector<double> mine;
  for (size_t l = 0; l < n; ++l) {
    for (double s : engine_s[l]) mine.push_back(s);
    mine.push_back(l < optimizer_s.size() ? optimizer_s[l] : 0.0);
  }
  LayerProfile profile;
  profile.step = step;
  profile.world = world.size();
  profile.seconds.resize(mine.size() * static_cast<size_t>(world.size()));
  SO_CHECK_MPI(MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, profile.seconds.data(),
                          static_cast<int>(mine.size()), MPI_DOUBLE, 0, world.world()));
  if (world.rank() != 0) return;
  ProfileShape model;
  profile.layers = layer_names(engine.layers());
  for (auto& layer : engine.layers()) {
    double parameters = 0;
    for (const auto& p : layer.layout().parameters()) parameters += static_cast<double>(p.numel);
    model.parameters.push_back(parameters);
  }
  model.active_parameters = static_cast<double>(shape.active_parameters);
  model.hidden = shape.hidden_size;
  model.seq_len = cfg.data.seq_len;
  model.activation_checkpointing = cfg.training.activation_checkpointing;
  model.tokens_per_rank = static_cast<double>(cfg.training.train_micro_batch_size_per_gpu *
                                              cfg.training.gradient_accumulation_steps * cfg.data.seq_len);
  count_layer_flops(model, profile);
  metrics.record_profile(profile);
  const auto table = format_layer_profile(profile, static_cast<size_t>(cfg.profile.top_layers));
  SO_LOG(info) << table;
  if (!cfg.profile.output_file.empty()) {
    // A profile that cannot be saved is no reason to end the run: it is in the log and metrics.h5.
    std::ofstream out(cfg.profile.output_file);
    out << table;
    out.close();
    if (!out) {
      SO_LOG(warning) << "cannot write the profile to " << cfg.profile.output_file << " ([profile] output_file): "
                      << std::strerror(errno) << "; it is in the log above and in metrics.h5 /profile";
    }
  }
}

// The start-up timeline after step 1: rank 0's phases with the slowest rank's time of each, in
// the log and metrics.h5. Collective.
void report_startup(const cluster::MpiWorld& world, const base::StartupTimeline& timeline, MetricsRecorder& metrics) {
  std::vector<double> seconds;
  for (const auto& phase : timeline.phases()) seconds.push_back(phase.cost.seconds);
  std::vector<double> slowest(seconds.size());
  SO_CHECK_MPI(MPI_Allreduce(seconds.data(), slowest.data(), static_cast<int>(seconds.size()), MPI_DOUBLE, MPI_MAX,
                             world.world()));
  if (world.rank() != 0) return;
  SO_LOG(info) << base::format_startup(timeline.phases(), slowest);
  metrics.record_startup(timeline.phases(), slowest);
}

// [profile] trace_steps: every rank's summary gathered on rank 0, which logs its own in full
// and a line per rank, and writes them all to metrics.h5. Collective.
void report_trace(const cluster::MpiWorld& world, const StepTracer& tracer, const nlohmann::json& mine,
                  MetricsRecorder& metrics) {
  const auto texts = cluster::MpiWorld::allgather(mine.dump(), world.world());
  if (world.rank() != 0) return;
  std::vector<nlohmann::json> summaries;
  for (const auto& text : texts) summaries.push_back(nlohmann::json::parse(text));
  metrics.record_trace(summaries);
  std::ostringstream log;
  log << "trace of rank 0 in " << tracer.trace_path().string() << " (every rank's beside it):\n";
  if (mine.contains("error")) {
    log << "  " << mine["error"].get<std::string>() << "\n";
  } else {
    log << format_trace_summary(mine);
  }
  if (summaries.size() > 1) {
    log << "  per rank:\n";
    for (size_t r = 0; r < summaries.size(); ++r) log << format_trace_rank_line(r, summaries[r]);
  }
  SO_LOG(info) << log.str();
}

// This rank's micro-batches of the next step, on the host. `trained`: the sampler's index i
// is sample trained[i] of the dataset (a share held out for validation); empty: sample i.
std::vector<MicroBatch> next_micro_batches(data::DistributedSampler& sampler, const data::TokenDataset& dataset,
                                           int64_t seq, const std::vector<int64_t>& trained) {
  std::vector<MicroBatch> batches;
  for (auto indices : sampler.next()) {
    if (!trained.empty()) {
      for (auto& index : indices) index = trained[static_cast<size_t>(index)];
    }
    auto tokens = at::empty({static_cast<int64_t>(indices.size()), seq}, at::kLong);
    auto labels = at::empty_like(tokens);
    auto positions = dataset.documents() ? at::empty_like(tokens) : at::Tensor();
    for (size_t i = 0; i < indices.size(); ++i) {
      const auto row = static_cast<int64_t>(i);
      dataset.sample(indices[i], tokens[row].data_ptr<int64_t>(), labels[row].data_ptr<int64_t>(),
                     positions.defined() ? positions[row].data_ptr<int64_t>() : nullptr);
    }
    batches.push_back({tokens, labels, positions});
  }
  return batches;
}

// The run's validation data: [data] eval_path (its own dataset, tokenized as the training
// data) or eval_fraction (a share of the training dataset, whose other samples alone are
// trained on).
struct ValidationSet {
  std::optional<data::TokenDataset> own;  // eval_path's samples
  std::vector<int64_t> trained;           // eval_fraction: the training samples; empty: all of them
  std::optional<Validation> validation;
};

void prepare_validation(ValidationSet& set, const config::Config& cfg, const cluster::MpiWorld& world, int replicas,
                        const data::TokenDataset& training, int64_t vocab_size) {
  const auto& t = cfg.training;
  const int64_t batch = t.per_device_eval_batch_size > 0 ? t.per_device_eval_batch_size : t.train_micro_batch_size_per_gpu;
  std::string source;
  if (!cfg.data.eval_path.empty()) {
    auto tokens = load_tokens(cfg, cfg.data.eval_path, world);
    const bool documents = attends_within_documents(cfg.data.attention, tokens, /*log=*/false);
    set.own.emplace(std::move(tokens), cfg.data.seq_len, cfg.data.eval_path, vocab_size, documents);
    std::vector<int64_t> all(static_cast<size_t>(set.own->size()));
    std::iota(all.begin(), all.end(), 0);
    source = cfg.data.eval_path + " ([data] eval_path)";
    set.validation.emplace(*set.own, std::move(all), batch, t.eval_max_batches, world, replicas, source);
  } else if (cfg.data.eval_fraction > 0) {
    auto split = data::hold_out(training.size(), cfg.data.eval_fraction, static_cast<uint64_t>(t.seed));
    set.trained = std::move(split.train);
    std::ostringstream what;
    what << split.eval.size() << " of the " << training.size() << " samples of " << cfg.data.path
         << " ([data] eval_fraction = " << cfg.data.eval_fraction << ")";
    source = what.str();
    set.validation.emplace(training, std::move(split.eval), batch, t.eval_max_batches, world, replicas, source);
  } else {
    return;
  }
  if (world.rank() == 0) {
    const auto& v = *set.validation;
    SO_LOG(info) << "validation: " << v.samples() << " samples of " << cfg.data.seq_len << " tokens from " << source
                 << (cfg.data.eval_fraction > 0 ? ", held out: never trained on" : "") << "; evaluated "
                 << (t.eval_every_steps > 0 ? "every " + std::to_string(t.eval_every_steps) + " steps and " : std::string())
                 << "at the end" << (t.eval_on_start ? " and before the first step" : "") << ", " << batch
                 << " samples per replica per forward (" << (v.batches() + replicas - 1) / replicas << " round(s) on "
                 << replicas << (replicas == world.size() ? " rank(s))" : " sequence-parallel groups)")
                 << (t.early_stopping_patience > 0
                         ? "; stops after " + std::to_string(t.early_stopping_patience) + " evaluations without improvement"
                         : std::string())
                 << (cfg.checkpoint.keep_best ? "; keeps the best checkpoint as checkpoints/best" : "");
  }
}

// One training run in its named phases, each a method, in the order run_training calls them:
//   set_up_engine  the memory check, the model, the communicators, the engine (weights read or
//                  initialised as it partitions), the optimizer, the cache partition;
//   set_up_data    the training and validation data, the sampler, the schedule;
//   resume         the checkpoint (if any), the metrics file;
//   loop           the steps, each one train_step: data, step, metrics, validation, saves,
//                  early stopping and preemption;
//   tear_down      the final checkpoint and the summary.
// Members are declared in the order the phases make them, so they go in the reverse order,
// as the locals of one long function did (the engine outlives the optimizer and checkpoints).
class TrainingRun {
 public:
  TrainingRun(const config::Config& cfg, const cluster::MpiWorld& world, const cluster::RankBinding& binding,
              const std::vector<std::string>& binding_table, const std::string& resume)
      : cfg_(cfg),
        t_(cfg.training),
        world_(world),
        binding_(binding),
        binding_table_(binding_table),
        resume_(resume),
        rank_(world.rank()),
        device_(choose_device(cfg.runtime, binding)),
        timeline_(base::StartupTimeline::instance()) {}

  void set_up_engine();
  void set_up_data();
  void resume();
  void loop();
  TrainSummary tear_down();

 private:
  // One step of the loop; false: the run stops after it (early stopping, a stop signal).
  bool train_step(int64_t step);
  std::pair<ValidationResult, EvalDecision> evaluate_after(int64_t step);
  TrainingPosition position_at(int64_t step) const {
    return TrainingPosition{step, sampler_->position(), skips_->total(), tracker_->state()};
  }

  const config::Config& cfg_;
  const config::TrainingConfig& t_;
  const cluster::MpiWorld& world_;
  const cluster::RankBinding& binding_;
  const std::vector<std::string>& binding_table_;
  const std::string resume_;
  const int rank_;
  const at::Device device_;
  base::StartupTimeline& timeline_;
  // set_up_engine
  std::string resume_request_;  // the checkpoint to resume from ("" none, "latest" or a directory)
  bool fill_from_checkpoint_ = false;  // one was found: the model was left for it to fill
  std::optional<model::LoadedModel> loaded_;
  model::ModelShape shape_;
  std::unique_ptr<comm::Communicator> communicator_;
  std::unique_ptr<zero::SequenceParallel> sequence_parallel_;
  std::unique_ptr<zero::ExpertParallel> expert_parallel_;
  std::unique_ptr<zero::ZeroEngine> engine_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::optional<CachePartition> cache_partition_;
  // set_up_data
  std::optional<data::TokenDataset> dataset_;
  ValidationSet eval_set_;
  std::optional<data::DistributedSampler> sampler_;
  int64_t total_steps_ = 0;
  std::optional<LrSchedule> schedule_;
  ThroughputInputs throughput_;
  double peak_ = 0;
  // resume
  std::unique_ptr<TrainingCheckpoints> checkpoints_;
  TrainingPosition position_;
  std::unique_ptr<MetricsRecorder> metrics_;
  // loop
  TrainSummary summary_;
  std::optional<SkipAccounting> skips_;
  double timed_s_ = 0;
  int64_t timed_steps_ = 0;
  double start_s_ = 0;
  std::optional<cluster::Watchdog> watchdog_;
  std::optional<EvalTracker> tracker_;
  const Validation* validation_ = nullptr;
  std::optional<StepTracer> tracer_;
};

void TrainingRun::set_up_engine() {
  const auto& cfg = cfg_;
  const auto& t = t_;
  const auto& world = world_;
  const int rank = rank_;
  const auto device = device_;
  auto& timeline = timeline_;
  if (rank == 0 && !device.is_cuda() && cfg.precision.bf16 && !cluster::cpu_has_native_bf16()) {
    SO_LOG(warning) << "[precision] bf16 = true on a CPU without native bf16 (no AVX512-BF16, AMX-BF16 or Arm BF16): "
                       "LibTorch emulates bf16 matrix products here, which can be tens of times slower than fp32 — "
                       "for a CPU run set [precision] bf16 = false";
  }
  // Each part a phase of the start-up timeline, reported after step 1.
  process_baseline_bytes();  // measured now, before the run allocates: the plan's runtime share
  // A run that will resume takes every weight and the optimizer state from the checkpoint:
  // its layers are neither read from safetensors nor initialised randomly first (for a 70B,
  // minutes of work the checkpoint overwrites), and its plan counts the resume's layer. Found
  // now, before the plan and the engine; resume() then loads it or throws (it never leaves a
  // half-loaded state).
  resume_request_ = !resume_.empty() ? resume_ : (cfg.checkpoint.auto_resume ? "latest" : "");
  if (!resume_request_.empty()) {
    std::vector<std::string> notes;  // resume() says them
    fill_from_checkpoint_ = !io::resolve_checkpoint(TrainingCheckpoints::root_of(cfg), resume_request_, world.world(),
                                                    notes, io::Verify::structure)
                                 .empty();
  }
  // A CPU run counts LibTorch's allocations, its device's, for /train/device_peak_bytes against
  // the plan's device terms (train/cpu_allocations.hpp); from here on, before the model exists.
  if (device.is_cpu()) count_cpu_allocations();
  if (cfg.runtime.check_memory) {
    check_memory_fits(cfg, world, device, fill_from_checkpoint_);
  } else {
    check_model_buildable(cfg);
  }
  timeline.mark("memory plan check");
  loaded_.emplace(model::load_model(cfg.model.path, cfg.model.plugin, cfg.model.init, static_cast<uint64_t>(t.seed),
                                    /*defer=*/true,
                                    cfg.model.allow_non_finite_weights ? model::NonFiniteWeights::allow
                                                                       : model::NonFiniteWeights::refuse));
  auto& loaded = *loaded_;
  if (rank == 0) {
    for (const auto& [key, p] : loaded.config.dropouts()) {
      SO_LOG(warning) << loaded.config.path() << ": " << key << " = " << p
                      << ": training runs without dropout (superoffload does not implement it; HF applies it in "
                         "train mode) — set it to 0.0 to silence this, or expect a run that regularises less than HF's";
    }
  }
  shape_ = loaded.model->shape();
  const auto& shape = shape_;
  timeline.mark("model build");
  communicator_ = zero::make_communicator(cfg.runtime.comm_backend, device, world.world());
  sequence_parallel_ = make_sequence_parallel(cfg, loaded.config, world, device);
  expert_parallel_ = make_expert_parallel(cfg, *loaded.model, world, device);
  const bool fill_from_checkpoint = fill_from_checkpoint_;
  // The engine fills and partitions the model layer by layer: the filling (weights read, or
  // random initialisation) is timed on its own.
  // Each rank fills only its own shards, straight into them: weights from safetensors by
  // reading their bytes (load_layer_ranges), random initialisation by drawing their blocks
  // (init_layer_ranges: the values whole layers would have).
  base::PhaseCost filling;
  const bool by_shard = !fill_from_checkpoint && loaded.fill_ranges != nullptr;
  const auto fill_shard =
      by_shard ? shard_filler(loaded, [&filling](const std::function<void()>& read) { base::add_cost(filling, read); })
               : nullptr;
  auto options = engine_options(cfg, device, shape.hidden_size, sequence_parallel_.get(), expert_parallel_.get());
  options.shards_filled_later = fill_from_checkpoint;
  engine_ = std::make_unique<zero::ZeroEngine>(
      loaded.model, *communicator_, options,
      [&filling, &loaded, fill_from_checkpoint, by_shard](size_t layer) {
        if (!fill_from_checkpoint && !by_shard) base::add_cost(filling, [&] { loaded.materialize(layer); });
      },
      fill_shard);
  auto& engine = *engine_;
  std::vector<base::StartupPhase> filled;
  if (!fill_from_checkpoint) {
    filled.push_back({loaded.pretrained ? "weights read" : "random initialisation", filling,
                      loaded.pretrained ? *loaded.bytes_read : std::nan("")});
  }
  timeline.mark("partitioning and communicator", filled);
  optimizer_ = make_optimizer(cfg, engine, binding_);
  const auto& optimizer = optimizer_;
  timeline.mark("optimizer state", optimizer->setup_phases());
  if (rank == 0) SO_LOG(info) << "optimizer: " << optimizer->describe();
  if (const int64_t tile = mlp_tile_tokens(cfg, shape.hidden_size); rank == 0 && tile > 0) {
    SO_LOG(info) << "MLP tiles: " << tile << " tokens of each micro-batch's "
                 << cfg.training.train_micro_batch_size_per_gpu * cfg.data.seq_len / cfg.parallel.sequence_parallel_size
                 << (cfg.parallel.sequence_parallel_size > 1 ? " on each rank (its sequence shard)" : "")
                 << " at a time, recomputed tile by tile in backward ([model] tile_tokens = " << cfg.model.tile_tokens
                 << (cfg.model.tile_tokens == 0 ? ": chosen" : "") << ")";
  }
  if (rank == 0 && engine.activation_offload()) {
    SO_LOG(info) << "activation offload: each layer's checkpointed input in "
                 << (device.is_cpu() ? "a second host buffer (a CPU run: host-to-host copies)"
                     : engine.activation_offload()->pinned() ? "pinned host memory"
                                                              : "plain host memory (not pinned: slower copies)")
                 << ", copied out in forward and back one layer ahead of its recompute";
  }
  // The optimizer's threads in a resctrl group of their own, the rest in another (or why not).
  cache_partition_.emplace(cfg.runtime, world, binding_.cpus.cpus(), optimizer->thread_ids());
  if (rank == 0) {
    for (const auto& line : cache_partition_->lines()) SO_LOG(info) << line;
  }
}

void TrainingRun::set_up_data() {
  const auto& cfg = cfg_;
  const auto& t = t_;
  const auto& world = world_;
  const int rank = rank_;
  auto& engine = *engine_;
  const auto& shape = shape_;
  auto tokens = load_tokens(cfg, cfg.data.path, world);
  const bool documents = attends_within_documents(cfg.data.attention, tokens, rank == 0);
  dataset_.emplace(std::move(tokens), cfg.data.seq_len, cfg.data.path, shape.vocab_size, documents);
  const auto& dataset = *dataset_;
  prepare_validation(eval_set_, cfg, world, engine.data_parallel_size(), dataset, shape.vocab_size);
  const auto& trained = eval_set_.trained;
  // Data parallelism is over replicas: the ranks of a sequence-parallel group draw the same rows.
  sampler_.emplace(trained.empty() ? dataset.size() : static_cast<int64_t>(trained.size()),
                   static_cast<uint64_t>(t.seed), cfg.data.shuffle, engine.data_parallel_size(),
                   engine.data_parallel_rank(), t.train_micro_batch_size_per_gpu, t.gradient_accumulation_steps);
  total_steps_ = t.max_steps > 0 ? t.max_steps : t.epochs * sampler_->batches_per_epoch();
  if (t.bench_steps > 0) total_steps_ = std::min(total_steps_, t.timing_warmup_steps + t.bench_steps);
  timeline_.mark("tokenizer and data");
  schedule_.emplace(cfg.lr_schedule, cfg.optimizer.lr, total_steps_);

  throughput_ = ThroughputInputs{.active_parameters = static_cast<double>(shape.active_parameters),
                                 .layers = shape.num_layers,
                                 .hidden = shape.hidden_size,
                                 .seq_len = cfg.data.seq_len,
                                 .activation_checkpointing = t.activation_checkpointing,
                                 .samples_per_step = t.train_batch_size,
                                 .world_size = world.size()};
  peak_ = peak_tflops(cfg.runtime.peak_tflops, binding_.gpu_name);
  if (rank == 0) {
    SO_LOG(info) << "training " << shape.total_parameters / 1e6 << "M parameters (" << shape.active_parameters / 1e6
                 << "M active) on " << world.size() << " rank(s), device " << device_.str() << ", "
                 << (cfg.precision.bf16 ? "bf16" : "fp32") << ", " << total_steps_ << " steps of "
                 << t.train_batch_size << " x " << cfg.data.seq_len << " tokens; dataset " << dataset.size()
                 << " samples" << (trained.empty() ? "" : ", " + std::to_string(trained.size()) + " trained on") << " ("
                 << sampler_->batches_per_epoch() << " steps per epoch)";
  }
}

void TrainingRun::resume() {
  const auto& cfg = cfg_;
  const auto& world = world_;
  const int rank = rank_;
  auto& engine = *engine_;
  checkpoints_ = std::make_unique<TrainingCheckpoints>(cfg, engine, *optimizer_, world,
                                                       nlohmann::json{{"path", cfg.model.path},
                                                                      {"architecture", loaded_->config.architecture()},
                                                                      {"plugin", loaded_->plugin.name},
                                                                      {"plugin_version", loaded_->plugin.version},
                                                                      {"total_parameters", shape_.total_parameters}});
  auto& checkpoints = *checkpoints_;
  if (!resume_request_.empty()) {
    if (auto resumed = checkpoints.resume(resume_request_)) {
      position_ = *resumed;
      sampler_->set_position(position_.sampler);
    } else if (fill_from_checkpoint_) {
      throw Error("the checkpoint found under " + checkpoints.root().string() +
                      " at start-up is gone, and the model was left for it to fill",
                  "keep the run directory unchanged while a job starts, and submit again", Error::UserInput{});
    } else if (rank == 0) {
      SO_LOG(info) << "no checkpoint under " << checkpoints.root().string() << ": starting from step 0";
    }
  }
  SO_CHECK(position_.step <= total_steps_, "the checkpoint is at step " << position_.step << ", past the "
                                                                       << total_steps_ << " steps of this run"
                                                                       << hint("raise [training] max_steps to train further"));
  timeline_.mark(position_.step > 0 ? "checkpoint resume" : "checkpoints");
  std::vector<std::string> startup_phases;
  for (const auto& phase : timeline_.phases()) startup_phases.push_back(phase.name);
  startup_phases.insert(startup_phases.end(), {"metrics", "first step"});
  metrics_ = std::make_unique<MetricsRecorder>(cfg, world, position_.step,
                                               run_attributes(cfg, world, binding_table_, device_, fill_from_checkpoint_),
                                               layer_names(engine.layers()), startup_phases);
  timeline_.mark("metrics");
}

std::pair<ValidationResult, EvalDecision> TrainingRun::evaluate_after(int64_t step) {
  const std::string name =
      step == 0 ? "evaluation before the first step: " : "evaluation after step " + std::to_string(step) + ": ";
  auto& watchdog = *watchdog_;
  const auto result = validation_->evaluate(*engine_, [&](const std::string& what) { watchdog.progress(name + what); });
  const auto decision = tracker_->observe(step, result.loss);
  metrics_->record_eval({.step = step, .loss = result.loss, .tokens = result.tokens, .seconds = result.seconds});
  if (rank_ == 0 && !std::isfinite(result.loss)) {
    SO_LOG(warning) << "the eval loss after step " << step << " is " << result.loss
                    << ": recorded in metrics.h5, never taken as the best (the weights have diverged if the training "
                       "loss has too; otherwise a validation sample overflows the compute precision)";
  }
  summary_.eval_loss = result.loss;
  return {result, decision};
}

void TrainingRun::loop() {
  const auto& t = t_;
  const int rank = rank_;
  auto& checkpoints = *checkpoints_;
  summary_.first_step = position_.step;
  skips_.emplace(cfg_.optimizer.max_consecutive_skips, position_.skipped_steps);
  start_s_ = now_s();
  // From here on every rank reports progress; a rank stuck past collective_timeout_s ends the job.
  watchdog_.emplace(cfg_.runtime.collective_timeout_s, rank);
  auto& watchdog = *watchdog_;
  checkpoints.on_progress([&watchdog](const std::string& what) { watchdog.progress(what); });
  // Validation: the best eval loss and the patience carry over from the checkpoint.
  tracker_.emplace(t.early_stopping_patience, t.early_stopping_threshold);
  tracker_->restore(position_.evaluation);
  validation_ = eval_set_.validation ? &*eval_set_.validation : nullptr;
  if (validation_ && t.eval_on_start && position_.step == 0) {
    const auto [result, decision] = evaluate_after(0);
    if (rank == 0) {
      SO_LOG(info) << "Step 0/" << total_steps_ << " (before training)" << format_eval(result.loss) << " | "
                   << result.tokens << " tokens in " << format_significant(result.seconds, 3) << " s";
    }
    if (cfg_.checkpoint.keep_best && decision.best) {
      checkpoints.save(position_at(0), TrainingCheckpoints::Kind::periodic, /*best=*/true);
    }
  }
  tracer_.emplace(cfg_.profile, engine_->device(), rank, t.output_dir, position_.step, total_steps_);
  for (int64_t step = position_.step; step < total_steps_; ++step) {
    if (!train_step(step)) return;
  }
}

bool TrainingRun::train_step(int64_t step) {
  // The names of one long function's locals, so the step reads as it did there.
  const auto& cfg = cfg_;
  const auto& t = t_;
  const auto& world = world_;
  const int rank = rank_;
  const auto device = device_;
  auto& timeline = timeline_;
  auto& engine = *engine_;
  auto& optimizer = optimizer_;
  auto& sampler = *sampler_;
  const auto& dataset = *dataset_;
  const auto& trained = eval_set_.trained;
  const auto& schedule = *schedule_;
  const auto& shape = shape_;
  auto& checkpoints = *checkpoints_;
  auto& metrics = *metrics_;
  auto& summary = summary_;
  auto& skips = *skips_;
  auto& watchdog = *watchdog_;
  auto& tracker = *tracker_;
  auto& tracer = *tracer_;
  auto& cache_partition = *cache_partition_;
  const auto& position = position_;
  const int64_t total_steps = total_steps_;
  const auto* validation = validation_;
  auto evaluate_after = [this](int64_t at) { return this->evaluate_after(at); };
  auto position_at = [this](int64_t at) { return this->position_at(at); };
  tracer.begin_step(step + 1);
  const double step_start = now_s();
  reset_device_peak(device);
  const std::string step_name = "step " + std::to_string(step + 1) + ": ";
  watchdog.progress(step_name + "data");
  const auto batches = [&] {
    const zero::TraceScope traced("superoffload/data");
    return next_micro_batches(sampler, dataset, cfg.data.seq_len, trained);
  }();
  const double data_s = now_s() - step_start;
  const double lr = schedule.at(step);
  std::optional<zero::LayerProfiler> profiler;  // [profile] step
  if (cfg.profile.step == step + 1) {
    profiler.emplace(engine.device(), engine.layers().size());
    engine.set_profiler(&*profiler);
  }
  const auto result = run_step(engine, *optimizer, batches, lr,
                               {.progress = [&](const std::string& what) { watchdog.progress(step_name + what); }});
  if (step == position.step) {
    timeline.mark("first step");
    report_startup(world, timeline, metrics);
  }
  if (const auto traced = tracer.end_step(step + 1)) {
    watchdog.progress(step_name + "trace summary");
    report_trace(world, tracer, *traced, metrics);
  }
  if (profiler) {
    engine.set_profiler(nullptr);
    watchdog.progress(step_name + "profile");
    report_layer_profile(cfg, world, engine, *optimizer, *profiler, shape, step + 1, metrics);
  }
  skips.count(result.outcome, result.loss, step + 1);
  const double step_s = now_s() - step_start;
  summary.losses.push_back(result.loss);
  if (step - position.step >= t.timing_warmup_steps) {  // a resumed run warms up again
    timed_s_ += step_s;
    ++timed_steps_;
  }
  const auto measured = measure_throughput(throughput_, step_s, peak_);
  const auto cache_use = cache_partition.sample();
  // Zero only when no layer computes it: with a router it is at least E·min(P) > 0.
  const double aux_loss = result.aux_loss > 0 ? result.aux_loss : std::nan("");
  metrics.record({.step = step + 1,
                  .loss = result.loss,
                  .lr = lr,
                  .grad_norm = result.outcome.grad_norm,
                  .step_time_s = step_s,
                  .aux_loss = aux_loss,
                  .throughput = measured,
                  .skipped = result.outcome.skipped,
                  .speculation = result.outcome.speculation,
                  .engine = result.engine,
                  .optimizer = result.optimizer,
                  .peak_gathered_elements = engine.memory().peak_live_numel,
                  .device_peak_bytes = device_peak_bytes(device).value_or(std::nan("")),
                  .device_reserved_peak_bytes = device_reserved_peak_bytes(device).value_or(std::nan("")),
                  .optimizer_mem_gb_per_s = cache_use.optimizer_gb_per_s,
                  .rest_mem_gb_per_s = cache_use.rest_gb_per_s,
                  .optimizer_cache_bytes = cache_use.optimizer_cache_bytes,
                  .rest_cache_bytes = cache_use.rest_cache_bytes});
  // Validation every eval_every_steps and after the last step.
  const bool evaluate_now = validation != nullptr && ((t.eval_every_steps > 0 && (step + 1) % t.eval_every_steps == 0) ||
                                                      step + 1 == total_steps);
  ValidationResult eval_result;
  EvalDecision decision;
  if (evaluate_now) std::tie(eval_result, decision) = evaluate_after(step + 1);
  if (rank == 0 && ((step + 1) % cfg.logging.log_every_steps == 0 || step + 1 == total_steps || evaluate_now)) {
    const double elapsed = now_s() - start_s_;
    SO_LOG(info) << format_step_line(
        {.step = step + 1,
         .total_steps = total_steps,
         .loss = result.loss,
         .lr = lr,
         .grad_norm = result.outcome.grad_norm,
         .aux_loss = aux_loss,
         .step_s = step_s,
         .throughput = measured,
         .skipped = result.outcome.skipped,
         .eta_s = elapsed / static_cast<double>(step + 1 - position.step) * static_cast<double>(total_steps - step - 1),
         .evaluated = evaluate_now,
         .eval_loss = eval_result.loss,
         .optimizer_mem_gb_per_s = cache_use.optimizer_gb_per_s,
         .optimizer_cap_percent = cache_partition.optimizer_bandwidth_cap_percent()});
    if (cfg.metrics.wall_clock_breakdown) {
      SO_LOG(info) << format_breakdown(result.engine, result.optimizer,
                                       {.step_s = step_s,
                                        .data_s = data_s,
                                        .forward_backward_s = result.forward_backward_s,
                                        .optimizer_s = result.optimizer_s});
    }
  }
  if (rank == 0 && cfg.logging.steps_per_print > 0 && (step + 1) % cfg.logging.steps_per_print == 0) {
    SO_LOG(info) << format_deepspeed_progress(step + 1, skips.total(), lr, cfg.optimizer.betas.at(0),
                                              cfg.optimizer.betas.at(1));
  }
  // A new lowest eval loss with [checkpoint] keep_best is saved now, whether or not a
  // periodic save falls on this step.
  const bool save_best = cfg.checkpoint.keep_best && decision.best;
  if ((cfg.checkpoint.every_steps > 0 && (step + 1) % cfg.checkpoint.every_steps == 0) || save_best) {
    watchdog.progress("saving the checkpoint of step " + std::to_string(step + 1));
    metrics.flush();
    checkpoints.save(position_at(step + 1), TrainingCheckpoints::Kind::periodic, save_best);
  }
  if (decision.stop) {
    const auto& best = tracker.state();
    if (rank == 0) {
      SO_LOG(warning) << "early stopping after step " << step + 1 << " of " << total_steps << ": " << tracker.patience()
                      << " evaluation(s) in a row without lowering the eval loss"
                      << (t.early_stopping_threshold > 0 ? " by more than " + format_significant(t.early_stopping_threshold, 3)
                                                         : std::string())
                      << " ([training] early_stopping_patience); the lowest was " << format_significant(best.best_loss, 6)
                      << " after step " << best.best_step;
    }
    metrics.flush();
    if (cfg.checkpoint.save_on_exit) {
      watchdog.progress("saving the checkpoint of the early stop");
      checkpoints.save(position_at(step + 1), TrainingCheckpoints::Kind::last);
    }
    summary.steps = step + 1;
    summary.stopped_early = true;
    return false;
  }
  watchdog.progress(step_name + "agreeing on stop signals");
  // Preemption: the ranks agree at the step boundary, save together and stop.
  if (step + 1 < total_steps && (summary.stop_signal = cluster::agreed_stop_signal(world.world())) != 0) {
    if (rank == 0) {
      SO_LOG(warning) << "signal " << summary.stop_signal << " (" << strsignal(summary.stop_signal)
                      << ") received: saving a checkpoint at step " << step + 1 << " and stopping";
    }
    metrics.flush();
    checkpoints.save(position_at(step + 1), TrainingCheckpoints::Kind::last);
    summary.steps = step + 1;
    return false;
  }
  return true;
}

TrainSummary TrainingRun::tear_down() {
  const auto& cfg = cfg_;
  const auto& t = t_;
  const int rank = rank_;
  const auto device = device_;
  auto& engine = *engine_;
  auto& checkpoints = *checkpoints_;
  auto& summary = summary_;
  auto& watchdog = *watchdog_;
  const auto& tracker = *tracker_;
  const auto* validation = validation_;
  const int64_t total_steps = total_steps_;
  auto position_at = [this](int64_t at) { return this->position_at(at); };
  watchdog.progress("waiting for a background checkpoint save");
  checkpoints.wait();
  if (summary.stop_signal == 0 && !summary.stopped_early) {
    summary.steps = total_steps;
    // A no-op when this step's checkpoint exists already (periodic save, or the resumed one).
    watchdog.progress("saving the final checkpoint");
    if (cfg.checkpoint.save_on_exit) checkpoints.save(position_at(total_steps), TrainingCheckpoints::Kind::last);
  }
  summary.best_eval_loss = tracker.state().best_loss;
  summary.best_eval_step = tracker.state().best_step;
  // A periodic save that failed and was tolerated must not end the run as if all were saved.
  checkpoints.require_last_saved();
  summary.skipped_steps = skips_->total();
  summary.mean_step_s = timed_steps_ > 0 ? timed_s_ / static_cast<double>(timed_steps_) : 0;
  summary.throughput = measure_throughput(throughput_, summary.mean_step_s, peak_);
  if (rank == 0) {
    const auto& memory = engine.memory();
    const auto& mean = summary.throughput;
    std::ostringstream timing;
    if (timed_steps_ == 0) {
      timing << "no step was timed (all " << summary.steps - summary.first_step << " fell within [training] "
             << "timing_warmup_steps = " << t.timing_warmup_steps << ")";
    } else {
      timing << "mean step " << format_significant(summary.mean_step_s * 1000, 4) << " ms over " << timed_steps_
             << " timed steps (after " << t.timing_warmup_steps << " warm-up), " << format_significant(mean.tokens_per_s, 3)
             << " tokens/s (" << format_significant(mean.tokens_per_s_per_device, 3) << " per device), TFLOPS "
             << format_significant(mean.model_tflops_per_device, 3) << " per device (model), "
             << format_significant(mean.hardware_tflops_per_device, 3) << " per device (hardware)";
      if (mean.mfu > 0) timing << ", MFU " << format_significant(100 * mean.mfu, 3) << "%, HFU "
                               << format_significant(100 * mean.hfu, 3) << "%";
    }
    SO_LOG(info) << "summary: " << summary.steps - summary.first_step << " steps"
                 << (summary.first_step > 0 ? " (from step " + std::to_string(summary.first_step) + ")" : std::string())
                 << ", loss " << format_significant(summary.losses.empty() ? 0.0 : summary.losses.front(), 6) << " -> "
                 << format_significant(summary.losses.empty() ? 0.0 : summary.losses.back(), 6) << "; " << timing.str()
                 << "; parameter elements per rank: shards " << memory.shard_numel << ", peak gathered "
                 << memory.peak_live_numel << ", saved activations " << memory.activation_bytes / 1e6
                 << " MB; skipped steps " << summary.skipped_steps;
    if (const auto* offload = engine.activation_offload()) {
      // On the CPU the compute side waits on the host; a GPU waits on its stream (not counted).
      SO_LOG(info) << "activation offload: " << offload->host_bytes() / 1e6 << " MB of host buffers, "
                   << 2 * offload->bytes_stored() / 1e9 << " GB copied out and back"
                   << (device.is_cpu() ? ", " + format_significant(offload->wait_seconds(), 3) + " s waited for copies"
                                       : std::string());
    }
    if (validation && tracker.state().evaluations > 0) {
      const auto& e = tracker.state();
      const auto best = cfg.checkpoint.keep_best ? io::read_best(checkpoints.root()) : std::filesystem::path();
      SO_LOG(info) << "validation: " << e.evaluations << " evaluation(s), last eval loss "
                   << format_significant(summary.eval_loss, 6) << "; lowest " << format_significant(e.best_loss, 6)
                   << " (ppl " << format_significant(std::exp(e.best_loss), 4) << ") after step " << e.best_step
                   << (best.empty() ? std::string() : ", checkpoint " + best.string())
                   << (summary.stopped_early ? "; stopped early" : "");
    }
  }
  return summary;

}

}  // namespace

TrainSummary run_training(const config::Config& cfg, const cluster::MpiWorld& world, const cluster::RankBinding& binding,
                          const std::vector<std::string>& binding_table, const std::string& resume) {
  TrainingRun run(cfg, world, binding, binding_table, resume);
  run.set_up_engine();
  run.set_up_data();
  run.resume();
  run.loop();
  return run.tear_down();
}

}  // namespace superoffload::train
