// The training loop.
#include "train/trainer.hpp"

#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "data/sampler.hpp"
#include "config/toml_writer.hpp"
#include "data/prepare.hpp"
#include "data/token_dataset.hpp"
#include "data/tokenizer.hpp"
#include "model/load_model.hpp"
#include "runtime/build_info.hpp"
#include "runtime/error.hpp"
#include "runtime/logging.hpp"
#include "runtime/mpi_world.hpp"
#include "runtime/stop_request.hpp"
#include "runtime/watchdog.hpp"
#include "runtime/timer.hpp"
#include "train/checkpointing.hpp"
#include "train/lr_schedule.hpp"
#include "train/memory_plan.hpp"
#include "train/metrics_recorder.hpp"
#include "train/throughput.hpp"
#include "zero/communicator_factory.hpp"
#include "zero/engine.hpp"
#include "zero/sharded_adamw.hpp"
#include "offload/offload_optimizer.hpp"

namespace superoffload::train {

using runtime::now_s;

namespace {

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return text;
}

at::Device choose_device(const config::RuntimeConfig& runtime, const runtime::RankBinding& binding) {
  if (runtime.device == "cpu") return at::kCPU;
  if (runtime.device == "cuda") {
    SO_CHECK(binding.gpu >= 0, "[runtime] device = \"cuda\" but this rank sees no GPU"
                                   << hint("check --gpus-per-task / CUDA_VISIBLE_DEVICES, or use device = \"auto\""));
    return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(binding.gpu));
  }
  return binding.gpu >= 0 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(binding.gpu)) : at::Device(at::kCPU);
}

// Pre-tokenized HDF5 as it is; JSONL tokenized now, the work split over the ranks.
data::TokenArrays load_training_tokens(const config::Config& cfg, const runtime::MpiWorld& world) {
  const auto format = data::resolve_data_format(cfg.data);
  if (format == "hdf5") return data::read_token_file(cfg.data.path);
  const auto tokenizer = data::load_tokenizer(cfg.data.tokenizer.empty() ? cfg.model.path : cfg.data.tokenizer);
  data::PrepareStats stats;
  auto arrays = data::prepare_records(cfg.data, format == "alpaca" ? data::RecordFormat::alpaca : data::RecordFormat::text,
                                      *tokenizer, world.world(), stats);
  if (world.rank() == 0) {
    SO_LOG(info) << "data: " << stats.records << " " << format << " records from " << cfg.data.path << ", "
                 << stats.tokens << " tokens (" << tokenizer->kind() << ")"
                 << (format == "alpaca" ? ", " + std::to_string(stats.rows) + " samples, " +
                                              std::to_string(stats.truncated) + " truncated, " +
                                              std::to_string(stats.dropped) + " dropped (no response left)"
                                        : std::string());
  }
  return arrays;
}

// Refuses, before anything is allocated, a run whose host memory need exceeds what this node
// has, with the numbers and the settings that would make it fit.
void check_memory_fits(const config::Config& cfg, const runtime::MpiWorld& world, bool on_gpu) {
  const auto size = model_size_from_config(cfg.model.path);
  const auto plan = plan_memory(size, cfg, world.size(), on_gpu);
  const double available = available_host_bytes();
  const double needed = plan.host_total() * world.local_size();
  if (world.rank() == 0) {
    for (const auto& line : describe_plan(size, plan, world.local_size(), 0, available)) SO_LOG(info) << "memory: " << line;
  }
  if (available <= 0 || needed <= 0.95 * available) return;
  // The smallest world (same ranks per node) that would fit.
  int ranks = world.size();
  while (ranks < (1 << 16) && plan_memory(size, cfg, ranks, on_gpu).host_total() * world.local_size() > 0.95 * available) ranks *= 2;
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

}  // namespace

TrainSummary run_training(const config::Config& cfg, const runtime::MpiWorld& world, const runtime::RankBinding& binding,
                          const std::string& resume) {
  const auto& t = cfg.training;
  const int rank = world.rank(), size = world.size();
  const at::Device device = choose_device(cfg.runtime, binding);

  if (cfg.runtime.check_memory) check_memory_fits(cfg, world, device.is_cuda());
  auto loaded = model::load_model(cfg.model.path, cfg.model.plugin, cfg.model.init, static_cast<uint64_t>(t.seed),
                                  /*defer=*/true);
  const auto shape = loaded.model->shape();
  auto communicator = zero::make_communicator(cfg.runtime.comm_backend, device, world.world());
  zero::EngineOptions options;
  options.compute_dtype = cfg.precision.bf16 ? at::kBFloat16 : at::kFloat;
  options.device = device;
  options.activation_checkpointing = t.activation_checkpointing;
  options.max_live_parameters = cfg.zero.stage3_max_live_parameters;
  options.prefetch_bucket_size = cfg.zero.stage3_prefetch_bucket_size;
  options.persistence_threshold = cfg.zero.stage3_param_persistence_threshold;
  zero::ZeroEngine engine(loaded.model, *communicator, options, loaded.materialize);
  // [offload] device = "cpu": the SuperOffload optimizer (speculative when super_offload);
  // "none": the reference AdamW over the shards, after backward.
  std::optional<offload::OffloadOptimizer> offloaded;
  std::optional<zero::ShardedAdamW> on_device;
  if (cfg.offload.device == "cpu") {
    offload::OffloadSettings s;
    s.beta1 = static_cast<float>(cfg.optimizer.betas[0]);
    s.beta2 = static_cast<float>(cfg.optimizer.betas[1]);
    s.eps = static_cast<float>(cfg.optimizer.eps);
    s.weight_decay = static_cast<float>(cfg.optimizer.weight_decay);
    s.decoupled = cfg.optimizer.type == "adamw";
    s.sub_group_size = cfg.zero.sub_group_size;
    s.ratio = cfg.offload.ratio;
    s.super_offload = cfg.offload.super_offload;
    s.gradient_clipping = t.gradient_clipping;
    s.pin_memory = cfg.offload.pin_memory;
    // cpuadam_cores_perc of the rank's bound cores, the first ones of its binding.
    const auto& cpus = binding.cpus.cpus();
    const auto count = std::max<size_t>(1, static_cast<size_t>(std::floor(cfg.offload.cpuadam_cores_perc * static_cast<double>(cpus.size()))));
    if (binding.source != runtime::BindingSource::none) s.cpus.assign(cpus.begin(), cpus.begin() + static_cast<std::ptrdiff_t>(std::min(count, cpus.size())));
    s.threads = count;
    offloaded.emplace(engine, s);
    if (rank == 0) {
      SO_LOG(info) << "optimizer: " << (s.super_offload ? "SuperOffload (CPU steps speculated during backward)" : "ZeRO-Offload (CPU steps after backward)")
                   << ", " << offloaded->cpu_sub_groups() << " of " << offloaded->sub_groups() << " sub-groups on the CPU (ratio "
                   << s.ratio << "), SIMD " << offload::adamw_target() << ", " << std::max(s.cpus.size(), s.threads)
                   << " thread(s)";
    }
  } else {
    on_device.emplace(engine, zero::AdamWSettings{cfg.optimizer.betas[0], cfg.optimizer.betas[1], cfg.optimizer.eps,
                                                  cfg.optimizer.weight_decay, cfg.optimizer.type == "adamw"});
  }

  const data::TokenDataset dataset(load_training_tokens(cfg, world), cfg.data.seq_len, cfg.data.path,
                                   shape.vocab_size);
  data::DistributedSampler sampler(dataset.size(), static_cast<uint64_t>(t.seed), cfg.data.shuffle, size, rank,
                                   t.train_micro_batch_size_per_gpu, t.gradient_accumulation_steps);
  int64_t total_steps = t.max_steps > 0 ? t.max_steps : t.epochs * sampler.batches_per_epoch();
  if (t.bench_steps > 0) total_steps = std::min(total_steps, t.warmup_steps + t.bench_steps);
  const LrSchedule schedule(cfg.lr_schedule, cfg.optimizer.lr, total_steps);

  ThroughputInputs throughput{static_cast<double>(shape.active_parameters), shape.num_layers, shape.hidden_size,
                              cfg.data.seq_len, t.activation_checkpointing, t.train_batch_size, size};
  const double peak = peak_tflops(cfg.runtime.peak_tflops, binding.gpu_name);
  if (rank == 0) {
    SO_LOG(info) << "training " << shape.total_parameters / 1e6 << "M parameters (" << shape.active_parameters / 1e6
                 << "M active) on " << size << " rank(s), device " << device.str() << ", "
                 << (cfg.precision.bf16 ? "bf16" : "fp32") << ", " << total_steps << " steps of "
                 << t.train_batch_size << " x " << cfg.data.seq_len << " tokens; dataset " << dataset.size()
                 << " samples (" << sampler.batches_per_epoch() << " steps per epoch)";
  }

  OptimizerAccess access;
  if (offloaded) {
    access.export_layer = [&](size_t l) { return offloaded->shard_state(l); };
    access.import_layer = [&](size_t l, const zero::ShardState& state) { offloaded->load_shard_state(l, state); };
  } else {
    access.export_layer = [&](size_t l) { return on_device->shard_state(l); };
    access.import_layer = [&](size_t l, const zero::ShardState& state) { on_device->load_shard_state(l, state); };
  }
  TrainingCheckpoints checkpoints(cfg, engine, access, world,
                                  {{"path", cfg.model.path},
                                   {"architecture", loaded.config.architecture()},
                                   {"plugin", loaded.plugin.name},
                                   {"plugin_version", loaded.plugin.version},
                                   {"total_parameters", shape.total_parameters}});
  TrainingPosition position;
  const std::string resume_request = !resume.empty() ? resume : (cfg.checkpoint.auto_resume ? "latest" : "");
  if (!resume_request.empty()) {
    if (auto resumed = checkpoints.resume(resume_request)) {
      position = *resumed;
      sampler.set_position(position.sampler);
    } else if (rank == 0) {
      SO_LOG(info) << "no checkpoint under " << checkpoints.root().string() << ": starting from step 0";
    }
  }
  SO_CHECK(position.step <= total_steps, "the checkpoint is at step " << position.step << ", past the "
                                                                     << total_steps << " steps of this run"
                                                                     << hint("raise [training] max_steps to train further"));

  std::map<std::string, std::string> attributes{{"config", config::to_toml(cfg)},
                                                 {"world_size", std::to_string(size)},
                                                 {"model", cfg.model.path},
                                                 {"git_revision", runtime::git_revision()}};
  {
    std::string hosts, versions, binding_table;
    for (const auto& host : runtime::MpiWorld::allgather(world.host(), world.world())) hosts += host + "\n";
    for (const auto& [name, version] : runtime::software_versions()) versions += name + " " + version + "\n";
    for (const auto& line : runtime::report_bindings(world, binding).table) binding_table += line + "\n";
    attributes.insert({{"hosts", hosts}, {"versions", versions}, {"binding", binding_table}});
  }
  MetricsRecorder metrics(cfg, world, position.step, attributes);

  TrainSummary summary;
  summary.first_step = position.step;
  summary.skipped_steps = position.skipped_steps;
  int64_t consecutive_skips = 0;
  double timed_s = 0;
  int64_t timed_steps = 0;
  const double start_s = now_s();
  const auto seq = cfg.data.seq_len;
  // From here on every rank reports progress; a rank stuck past collective_timeout_s ends the job.
  runtime::Watchdog watchdog(cfg.runtime.collective_timeout_s, rank);
  checkpoints.on_progress([&watchdog](const std::string& what) { watchdog.progress(what); });
  for (int64_t step = position.step; step < total_steps; ++step) {
    const double step_start = now_s();
    watchdog.progress("step " + std::to_string(step + 1) + ": data, forward and backward (all-gathers, reduce-scatters)");
    const auto micro_batches = sampler.next();
    std::vector<std::pair<at::Tensor, at::Tensor>> batches;
    double tokens = 0;
    for (const auto& indices : micro_batches) {
      auto inputs = at::empty({static_cast<int64_t>(indices.size()), seq}, at::kLong);
      auto labels = at::empty_like(inputs);
      for (size_t i = 0; i < indices.size(); ++i) {
        dataset.sample(indices[i], inputs[static_cast<int64_t>(i)].data_ptr<int64_t>(),
                       labels[static_cast<int64_t>(i)].data_ptr<int64_t>());
      }
      tokens += static_cast<double>(labels.ne(-100).sum().item<int64_t>());
      batches.emplace_back(inputs.to(device), labels.to(device));
    }
    // Every token of the global batch weighs the same: 1 / (tokens over all ranks).
    communicator->all_reduce_host(&tokens, 1, comm::ReduceOp::sum);
    engine.zero_grad();
    const double lr = schedule.at(step);
    if (offloaded) offloaded->begin_step(lr);
    double sums[2] = {0, 0};  // loss, aux
    for (size_t m = 0; m < batches.size(); ++m) {
      const auto r = engine.forward_backward(batches[m].first, batches[m].second, 1.0 / std::max(1.0, tokens),
                                             1.0 / static_cast<double>(batches.size() * size), m + 1 == batches.size());
      sums[0] += r.loss_sum;
      sums[1] += r.aux_loss;
    }
    communicator->all_reduce_host(sums, 2, comm::ReduceOp::sum);
    const double loss = sums[0] / std::max(1.0, tokens);
    watchdog.progress("step " + std::to_string(step + 1) + ": optimizer step (gradient-norm all-reduce)");
    double norm = 0;
    bool finite = true;
    int64_t rollbacks = 0;
    if (offloaded) {
      const auto outcome = offloaded->finish_step();
      norm = outcome.grad_norm;
      finite = !outcome.skipped;
      rollbacks = outcome.rolled_back;
    } else {
      norm = on_device->global_grad_norm();
      finite = std::isfinite(norm);
      if (finite) {
        if (t.gradient_clipping > 0) on_device->clip_gradients(t.gradient_clipping, norm);
        on_device->step(lr);
      }
    }
    if (finite) {
      consecutive_skips = 0;
    } else {
      ++summary.skipped_steps;
      SO_CHECK(++consecutive_skips < cfg.optimizer.max_consecutive_skips,
               consecutive_skips << " consecutive steps had non-finite gradients (step " << step + 1 << ")"
                                 << hint("lower [optimizer] lr, enable gradient_clipping, or check the data"));
    }
    const double step_s = now_s() - step_start;
    summary.losses.push_back(loss);
    if (step >= t.warmup_steps) {
      timed_s += step_s;
      ++timed_steps;
    }
    const double tflops = tflops_per_device(throughput, step_s);
    metrics.record({step + 1, loss, lr, norm, step_s, tokens / step_s, tflops, peak > 0 ? tflops / peak : 0.0, !finite,
                    rollbacks, engine.times(), offloaded ? offloaded->times() : offload::OffloadTimes{},
                    engine.memory().peak_live_numel});
    if (rank == 0 && ((step + 1) % cfg.logging.log_every_steps == 0 || step + 1 == total_steps)) {
      const double elapsed = now_s() - start_s;
      std::ostringstream line;
      line.setf(std::ios::fixed);
      line.precision(4);
      line << "Step " << step + 1 << "/" << total_steps << " | Loss " << loss;
      line.precision(3);
      line << std::scientific << " | LR " << lr << std::fixed << " | Grad norm " << norm;
      line.precision(0);
      line << " | Time " << step_s * 1000 << " ms";
      line.precision(2);
      line << " | TFLOPS " << tflops;
      line.precision(0);
      line << " | Tokens/s " << tokens / step_s;
      if (peak > 0) {
        line.precision(1);
        line << " | MFU " << 100 * tflops / peak << "%";
      }
      if (!finite) line << " | skipped (non-finite)";
      line << " | ETA " << format_duration(elapsed / static_cast<double>(step + 1 - position.step) * static_cast<double>(total_steps - step - 1));
      SO_LOG(info) << line.str();
      if (cfg.metrics.wall_clock_breakdown) {
        const auto& times = engine.times();
        std::ostringstream breakdown;
        breakdown << "  time breakdown (s): forward " << times.forward_s << ", backward " << times.backward_s
                  << ", gather wait " << times.gather_wait_s << ", reduce " << times.reduce_s;
        if (offloaded) {
          const auto& o = offloaded->times();
          breakdown << ", d2h " << o.d2h_s << ", cpu_step " << o.cpu_step_s << ", device_step " << o.device_step_s
                    << ", h2d " << o.h2d_s << ", wait " << o.wait_s << ", rollback " << o.rollback_s;
        }
        SO_LOG(info) << breakdown.str();
      }
    }
    engine.reset_times();
    if (cfg.checkpoint.every_steps > 0 && (step + 1) % cfg.checkpoint.every_steps == 0) {
      watchdog.progress("saving the checkpoint of step " + std::to_string(step + 1));
      checkpoints.save({step + 1, sampler.position(), summary.skipped_steps}, /*background=*/true);
    }
    watchdog.progress("step " + std::to_string(step + 1) + ": agreeing on stop signals");
    // Preemption: the ranks agree at the step boundary, save together and stop.
    if (step + 1 < total_steps && (summary.stop_signal = runtime::agreed_stop_signal(world.world())) != 0) {
      if (rank == 0) {
        SO_LOG(warning) << "signal " << summary.stop_signal << " (" << strsignal(summary.stop_signal)
                        << ") received: saving a checkpoint at step " << step + 1 << " and stopping";
      }
      checkpoints.save({step + 1, sampler.position(), summary.skipped_steps});
      summary.steps = step + 1;
      break;
    }
  }
  watchdog.progress("waiting for a background checkpoint save");
  checkpoints.wait();
  if (summary.stop_signal == 0) {
    summary.steps = total_steps;
    // A no-op when this step's checkpoint exists already (periodic save, or the resumed one).
    watchdog.progress("saving the final checkpoint");
    if (cfg.checkpoint.save_on_exit) checkpoints.save({total_steps, sampler.position(), summary.skipped_steps});
  }
  summary.mean_step_s = timed_steps > 0 ? timed_s / static_cast<double>(timed_steps) : 0;
  if (summary.mean_step_s > 0) {
    summary.tokens_per_s = static_cast<double>(t.train_batch_size * seq) / summary.mean_step_s;
    summary.tflops = tflops_per_device(throughput, summary.mean_step_s);
  }
  if (rank == 0) {
    const auto& memory = engine.memory();
    SO_LOG(info) << "summary: " << summary.steps - summary.first_step << " steps"
                 << (summary.first_step > 0 ? " (from step " + std::to_string(summary.first_step) + ")" : std::string())
                 << ", loss " << (summary.losses.empty() ? 0.0 : summary.losses.front()) << " -> "
                 << (summary.losses.empty() ? 0.0 : summary.losses.back()) << "; mean step " << summary.mean_step_s * 1000 << " ms (after "
                 << t.warmup_steps << " warm-up steps), " << summary.tokens_per_s << " tokens/s, " << summary.tflops
                 << " TFLOPS per device; parameter elements per rank: shards " << memory.shard_numel
                 << ", peak gathered " << memory.peak_live_numel << ", saved activations "
                 << memory.activation_bytes / 1e6 << " MB; skipped steps " << summary.skipped_steps;
  }
  return summary;
}

}  // namespace superoffload::train
