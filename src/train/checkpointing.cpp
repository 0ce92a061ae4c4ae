// TrainingCheckpoints: the torch side of checkpoints (io/ works on host pointers).
#include "train/checkpointing.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include <toml++/toml.h>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "base/non_finite.hpp"
#include "base/parallel_ranges.hpp"
#include "base/timer.hpp"
#include "cluster/check_mpi.hpp"
#include "cluster/compute_threads.hpp"
#include "cluster/mpi_world.hpp"
#include "config/toml_writer.hpp"
#include "io/checkpoint_files.hpp"
#include "io/checkpoint_reader.hpp"
#include "io/checkpoint_writer.hpp"
#include "optim/optimizer.hpp"
#include "train/build_info.hpp"
#include "zero/engine.hpp"

namespace superoffload::train {

namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> cpu_rng_state() {
  const auto state = at::detail::getDefaultCPUGenerator().get_state();
  const auto* bytes = state.data_ptr<uint8_t>();
  return {bytes, bytes + state.numel()};
}

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

void set_cpu_rng_state(const std::vector<uint8_t>& bytes) {
  auto state = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::memcpy(state.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  auto generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(state);
}

// NaN and inf in a layer's working weights: the engine's shard, on its device and in the compute
// dtype, which the optimizer writes from the fp32 master at every step (a non-finite master
// value stays non-finite there; a finite one beyond bf16's range becomes inf, and the model
// computes with that). Read where it is, so that no copy of the master is made to look at it.
int64_t count_non_finite_weights(const at::Tensor& shard) {
  if (shard.device().is_cpu() && shard.scalar_type() == at::kFloat && shard.is_contiguous()) {
    return base::count_non_finite(shard.const_data_ptr<float>(), shard.numel(),
                                  base::threads_for(shard.numel(), int64_t{1} << 22, cluster::compute_threads()));
  }
  constexpr int64_t kSlice = int64_t{1} << 24;  // a slice's boolean temporary: 16 MB
  int64_t count = 0;
  for (int64_t at = 0; at < shard.numel(); at += kSlice) {
    count += at::isfinite(shard.narrow(0, at, std::min(kSlice, shard.numel() - at))).logical_not().sum().item<int64_t>();
  }
  return count;
}

// The host pointers of a layer's exported state, for the writer.
io::ShardView view_of(const optim::ShardState& s) {
  return {.master = s.master.data_ptr<float>(),
          .exp_avg = s.exp_avg.data_ptr<float>(),
          .exp_avg_sq = s.exp_avg_sq.data_ptr<float>(),
          .numel = s.master.numel(),
          .steps = s.steps};
}

// A float setting as the manifest's TOML and this run both write it.
std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string shape_text(const nlohmann::json& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i].get<int64_t>();
  return out.str() + "]";
}

// This rank's shard of `layer` as ranges of the layer's full flat layout: {begin there, offset
// in the shard, length}, adjacent pieces merged (a whole shard without expert parallelism).
std::vector<std::array<int64_t, 3>> canonical_ranges(const zero::PartitionedLayer& layer) {
  std::vector<std::array<int64_t, 3>> ranges;
  for (const auto& piece : layer.shard_pieces()) {
    const int64_t begin = layer.layout().parameters()[piece.parameter].offset + piece.parameter_offset;
    if (!ranges.empty() && ranges.back()[0] + ranges.back()[2] == begin &&
        ranges.back()[1] + ranges.back()[2] == piece.shard_offset) {
      ranges.back()[2] += piece.length;
    } else {
      ranges.push_back({begin, piece.shard_offset, piece.length});
    }
  }
  return ranges;
}

// A layer's optimizer state in a checkpoint, in the order a resume reads and imports it.
constexpr std::array<const char*, 3> kStateFields{"master", "exp_avg", "exp_avg_sq"};
// Field f of kStateFields is optim::Optimizer::StateField f.
static_assert(static_cast<int>(optim::Optimizer::StateField::exp_avg) == 1 &&
              static_cast<int>(optim::Optimizer::StateField::exp_avg_sq) == 2);

// Reads `field` of layer `l` into `into` ([shard_numel]): this rank's ranges of the layer's full
// layout, wherever the writer's ranks held them; the padding between and after them is 0
// whatever the writer's padding held.
void read_field(io::CheckpointReader& reader, const zero::PartitionedLayer& layer, size_t l, const char* field,
                at::Tensor& into) {
  int64_t covered = 0;  // shard elements up to here are read or zeroed
  for (const auto& [begin, offset, length] : canonical_ranges(layer)) {
    if (offset > covered) into.narrow(0, covered, offset - covered).zero_();
    reader.read(l, field, begin, length, into.data_ptr<float>() + offset);
    covered = offset + length;
  }
  if (covered < into.numel()) into.narrow(0, covered, into.numel() - covered).zero_();
}

}  // namespace

int64_t TrainingCheckpoints::experts_split() const {
  for (const auto& layer : engine_.layers()) {
    if (layer.regions().size() > 1) return config_.moe.expert_parallel_size;
  }
  return 1;
}

const nlohmann::json& TrainingCheckpoints::placement() {
  if (placement_known_) return placement_;
  placement_known_ = true;
  auto& layers = engine_.layers();
  int split = 0;
  for (const auto& layer : layers) split = std::max(split, static_cast<int>(layer.regions().size() > 1));
  SO_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &split, 1, MPI_INT, MPI_MAX, world_.world()));
  if (split == 0) return placement_;
  // Every layer's ranges of this rank as one array: per layer its range count, then the ranges.
  std::vector<int64_t> mine;
  for (const auto& layer : layers) {
    const auto ranges = canonical_ranges(layer);
    mine.push_back(static_cast<int64_t>(ranges.size()));
    for (const auto& r : ranges) mine.insert(mine.end(), r.begin(), r.end());
  }
  const int world = world_.size();
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<size_t>(world)), displacements(static_cast<size_t>(world));
  SO_CHECK_MPI(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, world_.world()));
  std::vector<int64_t> all;
  if (world_.rank() == 0) {
    int total = 0;
    for (int r = 0; r < world; ++r) {
      displacements[static_cast<size_t>(r)] = total;
      total += counts[static_cast<size_t>(r)];
    }
    all.resize(static_cast<size_t>(total));
  }
  SO_CHECK_MPI(MPI_Gatherv(mine.data(), count, MPI_INT64_T, all.data(), counts.data(), displacements.data(),
                           MPI_INT64_T, 0, world_.world()));
  if (world_.rank() != 0) return placement_;  // only rank 0 writes the manifest
  placement_ = nlohmann::json::array();
  for (size_t l = 0; l < layers.size(); ++l) placement_.push_back(nlohmann::json::array());
  for (int r = 0; r < world; ++r) {
    size_t at = static_cast<size_t>(displacements[static_cast<size_t>(r)]);
    for (size_t l = 0; l < layers.size(); ++l) {
      const auto n = static_cast<size_t>(all[at++]);
      nlohmann::json ranges = nlohmann::json::array();
      for (size_t i = 0; i < n; ++i, at += 3) ranges.push_back({all[at], all[at + 1], all[at + 2]});
      placement_[l].push_back(std::move(ranges));
    }
  }
  return placement_;
}

TrainingCheckpoints::TrainingCheckpoints(const config::Config& config, zero::ZeroEngine& engine, optim::Optimizer& optimizer,
                                         const cluster::MpiWorld& world, nlohmann::json model)
    : config_(config), engine_(engine), optimizer_(optimizer), world_(world), model_(std::move(model)),
      root_(root_of(config)), global_batch_(config.training.train_batch_size) {}

void TrainingCheckpoints::save(const TrainingPosition& position, Kind kind, bool best) {
  wait();
  // A writer thread makes MPI calls beside the training thread's: only with MPI_THREAD_MULTIPLE.
  const bool background =
      kind == Kind::periodic && config_.checkpoint.async_save && world_.thread_level() == MPI_THREAD_MULTIPLE;
  const double copy_start_s = base::now_s();
  auto& layers = engine_.layers();
  nlohmann::json layout = nlohmann::json::array();
  const auto& placed = placement();
  io::ShardSource source;
  for (size_t l = 0; l < layers.size(); ++l) {
    source.numel.push_back(layers[l].shard_numel());
    const auto& l_layout = layers[l].layout();
    nlohmann::json parameters = nlohmann::json::array();
    for (const auto& p : l_layout.parameters()) {
      parameters.push_back({{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}, {"numel", p.numel},
                            {"weight_decay", p.weight_decay}});
    }
    layout.push_back({{"prefix", layers[l].layer().hf_prefix()}, {"numel", l_layout.numel()},
                      {"shard_numel", layers[l].shard_numel()}, {"parameters", parameters}});
    if (!placed.is_null()) layout.back()["placement"] = placed[l];
  }
  refuse_non_finite_weights(position.step);
  if (background) {
    // A background save needs its own copy of every layer's state, made now: the optimizer's
    // host buffers change next step (the setting's documented cost: one more copy of the state).
    // Where the export is a copy already (state on NVMe, bf16 moments, a GPU run), it is that
    // copy; cloned again, each layer had briefly existed twice.
    auto states = std::make_shared<std::vector<optim::ShardState>>();
    for (size_t l = 0; l < layers.size(); ++l) {
      auto s = optimizer_.export_layer(l);
      if (!s.copied) s = {s.master.clone(), s.exp_avg.clone(), s.exp_avg_sq.clone(), s.steps, true};
      states->push_back(std::move(s));
    }
    source.fetch = [states](size_t l) { return view_of((*states)[l]); };
  } else {
    // Layer by layer as the file reaches it: where the optimizer exports a copy (state on NVMe,
    // bf16 moments widened, a layer of several sub-groups joined), one layer's copy exists at a
    // time. (All layers exported first took 12 bytes per parameter beyond the plan: a 1.5B run
    // with its state on NVMe, 14 GB at its peak, was killed at 22 GB by the OOM killer at its
    // first save on this 24 GiB machine.)
    source.fetch = [this, held = std::make_shared<optim::ShardState>()](size_t l) {
      *held = {};  // the last layer's copy goes before this one's is made
      auto s = optimizer_.export_layer(l);
      *held = {s.master.contiguous(), s.exp_avg.contiguous(), s.exp_avg_sq.contiguous(), s.steps};
      return view_of(*held);
    };
  }
  nlohmann::json manifest;
  manifest["layers"] = layout;
  manifest["model"] = model_;
  manifest["training"] = {{"step", position.step},
                          {"sampler_epoch", position.sampler.epoch},
                          {"sampler_batch", position.sampler.batch},
                          {"global_batch_samples", global_batch_},
                          {"skipped_steps", position.skipped_steps},
                          {"seed", config_.training.seed}};
  manifest["evaluation"] = EvalTracker::to_json(position.evaluation);
  manifest["precision"] = config_.precision.bf16 ? "bf16" : "fp32";
  // Where experts live is in each layer's placement; this says how they were split (1 where
  // nothing was: a dense model ignores the setting).
  manifest["expert_parallel_size"] = experts_split();
  std::error_code no_size;
  const auto data_bytes = fs::file_size(config_.data.path, no_size);
  manifest["data"] = {{"path", config_.data.path}, {"bytes", no_size ? -1 : static_cast<int64_t>(data_bytes)}};
  // The moments are stored in fp32 whatever the run kept them in (bf16 widens exactly), so a
  // checkpoint loads into either setting; this records which one wrote it.
  manifest["optimizer_state_dtype"] = std::string(config::to_text(config_.offload.optimizer_state_dtype));
  manifest["config"] = config::to_toml(config_);
  nlohmann::json versions = nlohmann::json::object();
  for (const auto& [name, version] : train::software_versions()) versions[name] = version;
  manifest["versions"] = versions;
  manifest["git_revision"] = train::git_revision();
  auto progress = progress_ ? [this, step = position.step](const std::string& what) {
    progress_("saving the checkpoint of step " + std::to_string(step) + ": " + what);
  } : std::function<void(const std::string&)>();
  // Runs on this thread, or on the writer thread for a background save.
  auto write = [this, source = std::move(source), manifest = std::move(manifest),
                step = position.step, background, best, position_best_loss = position.evaluation.best_loss, copy_s = base::now_s() - copy_start_s, blobs = io::RankBlobs{{"rng_state", cpu_rng_state()}, {"optimizer_state", bytes_of(optimizer_.export_rank_state())}},
                progress = std::move(progress)]() mutable {
    const auto result = io::save_checkpoint(root_, step, source, blobs, manifest, config_.checkpoint.keep_last,
                                            background ? writer_comm_ : world_.world(),
                                            background ? std::function<void(const std::string&)>() : progress,
                                            config_.checkpoint.verify_from_disk ? io::ReadBack::device
                                                                                : io::ReadBack::page_cache,
                                            best);
    if (failed_in_a_row_ > 0 && world_.rank() == 0 && !result.already_saved) {
      SO_LOG(warning) << "checkpoints are saved again after " << failed_in_a_row_ << " failed save(s)";
    }
    if (!result.already_saved) failed_in_a_row_ = 0;
    if (world_.rank() != 0) return;
    if (result.already_saved) {
      SO_LOG(debug) << "checkpoint " << result.directory.string() << " exists already";
    } else {
      SO_LOG(info) << "checkpoint saved: " << result.directory.string() << " (" << result.bytes / 1e6 << " MB in "
                   << result.seconds << " s, " << result.bytes / 1e9 / std::max(result.seconds, 1e-9) << " GB/s"
                   << (background ? "; written in the background, training paused " + std::to_string(copy_s) + " s for the copy"
                                  : std::string())
                   << ")";
    }
    if (best) {
      SO_LOG(info) << "best checkpoint: " << result.directory.string() << " (eval loss " << position_best_loss
                   << "), named by " << (root_ / "best").string();
    }
  };
  if (!background) {
    try {
      write();
    } catch (const io::SaveFailed&) {
      if (kind == Kind::last) throw;
      tolerate_or_rethrow(std::current_exception());
    }
    return;
  }
  if (writer_comm_ == MPI_COMM_NULL) SO_CHECK_MPI(MPI_Comm_dup(world_.world(), &writer_comm_));
  writer_ = std::thread([this, write = std::move(write)]() mutable {
    try {
      // Tests only (tests/cli/test_checkpoint_resume.sh): the write starts this late, after the
      // next step has changed the optimizer's state, so a save that held views of that state
      // instead of a copy would write the later values.
      if (const char* delay = std::getenv("SUPEROFFLOAD_TEST_BACKGROUND_SAVE_DELAY_MS")) {
        std::this_thread::sleep_for(std::chrono::milliseconds(std::max(0, std::atoi(delay))));
      }
      write();
    } catch (const io::SaveFailed& e) {
      // Said now, not at the next save, which decides whether training may go on.
      if (world_.rank() == 0) SO_LOG(error) << e.what() << " (a background save)";
      writer_error_ = std::current_exception();
    } catch (...) {
      writer_error_ = std::current_exception();
    }
  });
}

// A checkpoint of non-finite weights must never become `latest`: a requeued job would resume
// from it and lose the run. Skipped steps keep NaN out of the weights, so this fires only
// when something else went wrong; the job ends with the previous checkpoint still latest.
// Weights loaded with [model] allow_non_finite_weights are saved with a warning instead.
void TrainingCheckpoints::refuse_non_finite_weights(int64_t step) {
  int64_t total = 0, first_layer = INT64_MAX;  // non-finite values; the first layer holding one
  for (size_t l = 0; l < engine_.layers().size(); ++l) {
    const auto n = count_non_finite_weights(engine_.layers()[l].shard());
    total += n;
    if (n > 0) first_layer = std::min(first_layer, static_cast<int64_t>(l));
  }
  SO_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_INT64_T, MPI_SUM, world_.world()));
  SO_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &first_layer, 1, MPI_INT64_T, MPI_MIN, world_.world()));
  if (total == 0) return;
  const auto& prefix = engine_.layers()[static_cast<size_t>(first_layer)].layer().hf_prefix();
  if (config_.model.allow_non_finite_weights) {
    if (world_.rank() == 0) {
      SO_LOG(warning) << "the weights hold " << total << " non-finite value(s) at step " << step << " (first in layer "
                      << first_layer << ", " << prefix << "); saved anyway: [model] allow_non_finite_weights = true";
    }
    return;
  }
  const auto latest = io::read_latest(root_);
  std::ostringstream message;
  message << "the weights hold " << total << " non-finite value(s) (NaN or inf) at step " << step << ", first in layer "
          << first_layer << " (" << prefix << "): the checkpoint of step " << step << " is not written, and "
          << (latest.empty() ? std::string("no checkpoint is 'latest'") : "'latest' still names " + latest.string());
  throw Error(message.str(), "the run diverged: lower [optimizer] lr or enable [training] gradient_clipping",
              Error::UserInput{});
}

void TrainingCheckpoints::wait() {
  if (writer_.joinable()) writer_.join();
  if (!writer_error_) return;
  auto error = std::exchange(writer_error_, nullptr);
  try {
    std::rethrow_exception(error);
  } catch (const io::SaveFailed&) {
    tolerate_or_rethrow(error);  // background saves are periodic ones
  }
}

// What a failed save means: the job ends (DeepSpeed, HF Trainer), unless the user allowed
// [checkpoint] max_failed_saves in a row. Then the run goes on with an error in the log per
// failure, so that no more than the interval is ever at risk without the user being told; the
// next periodic save tries again, and the run still ends with an error if its state is never
// saved (require_last_saved).
void TrainingCheckpoints::tolerate_or_rethrow(std::exception_ptr failure) {
  std::string what;
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    what = e.what();
  }
  const int64_t allowed = config_.checkpoint.max_failed_saves;
  if (failed_in_a_row_ + 1 > allowed) {
    if (allowed == 0) std::rethrow_exception(failure);
    throw Error(what + "; " + std::to_string(failed_in_a_row_ + 1) + " saves in a row failed",
                "[checkpoint] max_failed_saves = " + std::to_string(allowed) +
                    " allows no more: free space on the file system of [training] output_dir (or raise the quota), "
                    "then resume: the job restarts from 'latest'",
                Error::UserInput{});
  }
  ++failed_in_a_row_;
  last_failure_ = what;
  if (world_.rank() == 0) {
    SO_LOG(error) << what << "; training goes on (failed save " << failed_in_a_row_ << " in a row of the "
                  << allowed << " that [checkpoint] max_failed_saves allows), the next save is tried in "
                  << config_.checkpoint.every_steps << " step(s)";
  }
}

void TrainingCheckpoints::require_last_saved() const {
  if (failed_in_a_row_ == 0) return;
  throw Error("training ended, but its state is not saved: " + last_failure_,
              "free space on the file system of [training] output_dir, then run again with --resume latest: the "
              "job restarts from 'latest'",
              Error::UserInput{});
}

TrainingCheckpoints::~TrainingCheckpoints() {
  if (writer_.joinable()) writer_.join();  // an error here was already reported, or the job is ending
  if (writer_comm_ != MPI_COMM_NULL) MPI_Comm_free(&writer_comm_);
}

void TrainingCheckpoints::check_model_matches(const nlohmann::json& manifest, const fs::path& directory) const {
  const auto& saved = manifest.at("layers");
  auto& layers = engine_.layers();
  SO_CHECK(saved.size() == layers.size(), "checkpoint " << directory.string() << " has " << saved.size()
                                                        << " layers; this model has " << layers.size()
                                                        << hint("resume with the model the checkpoint was written for"));
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& parameters = layers[l].layout().parameters();
    const auto& there = saved[l].at("parameters");
    SO_CHECK(there.size() == parameters.size(), "checkpoint " << directory.string() << ": layer " << l << " has "
                                                              << there.size() << " parameters there and "
                                                              << parameters.size() << " here");
    for (size_t p = 0; p < parameters.size(); ++p) {
      const auto& mine = parameters[p];
      SO_CHECK(there[p].at("name").get<std::string>() == mine.name && there[p].at("shape") == nlohmann::json(mine.shape) &&
                   there[p].at("offset").get<int64_t>() == mine.offset,
               "checkpoint " << directory.string() << " was written for another model: parameter " << p << " of layer "
                             << l << " is " << there[p].at("name").get<std::string>() << " " << shape_text(there[p].at("shape"))
                             << " there and " << mine.name << " " << shape_text(nlohmann::json(mine.shape)) << " here"
                             << hint("resume with the model (and plugin) the checkpoint was written for"));
    }
  }
}

// What the run trains on and how: a resume that changes any of it silently continues another
// run under this one's name (other samples, another order, another precision). Refused unless
// [checkpoint] accept_changed_settings, which resumes with a warning per change.
void TrainingCheckpoints::check_run_unchanged(const nlohmann::json& manifest, const fs::path& directory) const {
  if (!manifest.contains("config") || !manifest.at("config").is_string()) return;  // not written by train
  toml::table saved;
  try {
    saved = toml::parse(manifest.at("config").get<std::string>());
  } catch (const toml::parse_error&) {
    throw Error("checkpoint " + directory.string() + ": manifest.json's config is not valid TOML",
                "the checkpoint is corrupt; resume from another one", Error::UserInput{});
  }
  std::vector<std::string> changes;
  auto compare = [&](const char* section, const char* key, const std::string& now) {
    const auto* node = saved.at_path(std::string(section) + "." + key).node();
    if (!node) return;  // checkpoints from before the key existed
    std::string then;
    if (const auto* text = node->as_string()) then = "\"" + text->get() + "\"";
    else if (const auto* flag = node->as_boolean()) then = flag->get() ? "true" : "false";
    else if (const auto* number = node->as_integer()) then = std::to_string(number->get());
    else if (const auto* real = node->as_floating_point()) then = number_text(real->get());
    if (then != now) changes.push_back(std::string("[") + section + "] " + key + " was " + then + ", is " + now);
  };
  auto quoted = [](const std::string& text) { return "\"" + text + "\""; };
  compare("data", "path", quoted(config_.data.path));
  compare("data", "seq_len", std::to_string(config_.data.seq_len));
  compare("data", "shuffle", config_.data.shuffle ? "true" : "false");
  compare("data", "packing", config_.data.packing ? "true" : "false");
  compare("data", "attention", quoted(std::string(config::to_text(config_.data.attention))));
  // The validation data: another share or file is another training set (eval_fraction) or
  // another curve, whose best and patience the checkpoint's would be compared with.
  compare("data", "eval_path", quoted(config_.data.eval_path));
  compare("data", "eval_fraction", number_text(config_.data.eval_fraction));
  compare("training", "seed", std::to_string(config_.training.seed));
  compare("precision", "bf16", config_.precision.bf16 ? "true" : "false");
  // The data file itself: the same name with other contents is another dataset.
  const auto saved_bytes = manifest.value("data", nlohmann::json::object()).value("bytes", int64_t{-1});
  std::error_code error;
  const auto bytes = static_cast<int64_t>(fs::file_size(config_.data.path, error));
  if (saved_bytes >= 0 && !error && saved_bytes != bytes) {
    changes.push_back("the data file " + config_.data.path + " held " + std::to_string(saved_bytes) + " bytes, now " +
                      std::to_string(bytes));
  }
  if (changes.empty()) return;
  std::string list;
  for (const auto& change : changes) list += (list.empty() ? "" : "; ") + change;
  if (config_.checkpoint.accept_changed_settings) {
    if (world_.rank() == 0) {
      SO_LOG(warning) << "resuming from " << directory.string() << " although the run changed: " << list
                      << " ([checkpoint] accept_changed_settings = true)";
    }
    return;
  }
  throw Error("checkpoint " + directory.string() + " belongs to a run with other settings: " + list,
              "restore them, start in a new [training] output_dir, or set [checkpoint] accept_changed_settings = true "
              "to continue with the new ones",
              Error::UserInput{});
}

fs::path TrainingCheckpoints::root_of(const config::Config& config) {
  return fs::path(config.training.output_dir) / "checkpoints";
}

std::optional<TrainingPosition> TrainingCheckpoints::resume(const std::string& request) {
  std::vector<std::string> notes;
  // Structure only: every byte the load reads is checked against its checksums, and a load
  // that fails falls back below, so the rank files are read once, not twice.
  auto directory = io::resolve_checkpoint(root_, request, world_.world(), notes, io::Verify::structure);
  if (world_.rank() == 0) {
    for (const auto& note : notes) SO_LOG(warning) << note;
  }
  if (directory.empty()) return std::nullopt;
  // A checkpoint can verify (sizes, CRCs) and still fail to read on some rank. Every layer of
  // a fallback is imported again, so a half-loaded state never survives.
  for (;;) {
    io::CheckpointReader reader(directory, cluster::compute_threads());
    // The model and the run's settings: the same answer on every rank and for every
    // checkpoint of the run, so a mismatch is an error, not a reason to fall back.
    check_model_matches(reader.manifest(), directory);
    check_run_unchanged(reader.manifest(), directory);
    std::string failure;
    std::optional<TrainingPosition> position;
    try {
      position = load_from(reader, directory);
    } catch (const std::exception& e) {
      failure = world_.size() > 1 ? "rank " + std::to_string(world_.rank()) + ": " + e.what() : std::string(e.what());
    }
    failure = io::lowest_rank_failure(failure, world_.world());
    if (failure.empty()) {
      // Said once every rank has loaded: a rank that failed makes all of them fall back.
      if (world_.rank() == 0) {
        SO_LOG(info) << "resumed from " << directory.string() << ": step " << position->step << ", written by "
                     << reader.world_size() << " rank(s)" << (reader.world_size() != world_.size() ? " (resharded)" : "")
                     << ", epoch " << position->sampler.epoch << " batch " << position->sampler.batch;
      }
      return position;
    }
    fs::path older;
    if (request == "latest") {
      for (const auto& candidate : io::list_checkpoints(root_)) {  // oldest first
        if (io::step_of(candidate).value_or(INT64_MAX) >= io::step_of(directory).value_or(0)) break;
        if (io::checkpoint_problem(candidate, world_.world(), io::Verify::structure).empty()) older = candidate;
      }
    }
    if (older.empty()) {
      throw Error("cannot resume from " + directory.string() + ": " + failure,
                  request == "latest" ? "no older intact checkpoint is left under " + root_.string()
                                      : "pick another checkpoint, or --resume latest",
                  Error::UserInput{});
    }
    if (world_.rank() == 0) {
      SO_LOG(warning) << "reading " << directory.string() << " failed (" << failure << "): falling back to "
                      << older.string() << ", the newest intact checkpoint before it";
    }
    directory = older;
  }
}

// Tests only (tests/cli/test_resume_guards.sh): SUPEROFFLOAD_TEST_FAIL_IMPORT="RANK:LAYER" makes
// that rank's import of that layer's first moment fail once, as a device copy out of memory would,
// while the reading thread is ahead of it: the thread must be stopped and joined, and every rank
// fall back together.
void TrainingCheckpoints::fail_import_for_a_test(size_t layer, size_t field) const {
  static bool failed = false;
  const char* spec = std::getenv("SUPEROFFLOAD_TEST_FAIL_IMPORT");
  if (failed || !spec || field != 1) return;
  int rank = -1;
  long long at = -1;
  if (std::sscanf(spec, "%d:%lld", &rank, &at) != 2 || rank != world_.rank() || at != static_cast<long long>(layer)) return;
  failed = true;
  SO_FAIL("importing layer " << layer << "'s exp_avg failed (SUPEROFFLOAD_TEST_FAIL_IMPORT)");
}

void TrainingCheckpoints::import_reading_ahead(io::CheckpointReader& reader,
                                               const std::function<at::Tensor(size_t, size_t)>& slot) {
  // A thread reads while this one imports: the next field (or the next layer's master) is read
  // into its own third of the buffer while this one is taken, so a resume's reading does not
  // wait for the optimizer's copies nor they for it (a third of a 0.55B's cold 1-rank resume
  // at 1 GB/s was the import, 1.2-1.6 s). Reading, and with it every call into HDF5, stays on
  // the reading thread; importing, and with it any device copy, on this one.
  const auto& layers = engine_.layers();
  const size_t items = kStateFields.size() * layers.size();  // item k: field k % 3 of layer k / 3
  std::mutex mutex;
  std::condition_variable changed;
  size_t read = 0, taken = 0;  // items read, items imported
  bool stop = false;           // the importing side failed
  std::exception_ptr read_error;
  std::vector<int64_t> steps(layers.size());
  std::thread reading([&] {
    try {
      for (size_t k = 0; k < items; ++k) {
        {
          std::unique_lock lock(mutex);
          // Item k's third of the buffer is free once item k - 3 is imported.
          changed.wait(lock, [&] { return stop || taken + kStateFields.size() > k; });
          if (stop) return;
        }
        const size_t l = k / kStateFields.size(), f = k % kStateFields.size();
        auto into = slot(f, l);
        read_field(reader, layers[l], l, kStateFields[f], into);
        if (f + 1 == kStateFields.size()) steps[l] = reader.steps(l);
        {
          std::lock_guard lock(mutex);
          read = k + 1;
        }
        changed.notify_all();
      }
    } catch (...) {
      {
        std::lock_guard lock(mutex);
        read_error = std::current_exception();
      }
      changed.notify_all();
    }
  });
  try {
    for (size_t k = 0; k < items; ++k) {
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return read > k || read_error; });
        if (read <= k) std::rethrow_exception(read_error);
      }
      const size_t l = k / kStateFields.size(), f = k % kStateFields.size();
      fail_import_for_a_test(l, f);
      optimizer_.import_field(l, static_cast<optim::Optimizer::StateField>(f), slot(f, l));
      if (f + 1 == kStateFields.size()) optimizer_.finish_import(l, steps[l]);
      {
        std::lock_guard lock(mutex);
        taken = k + 1;
      }
      changed.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    changed.notify_all();
    reading.join();
    throw;
  }
  reading.join();
}

TrainingPosition TrainingCheckpoints::load_from(io::CheckpointReader& reader, const fs::path& directory) {
  // Checkpoints before this key had fp32 moments.
  const auto saved_dtype = reader.manifest().value("optimizer_state_dtype", std::string("fp32"));
  const std::string dtype(config::to_text(config_.offload.optimizer_state_dtype));
  if (world_.rank() == 0 && saved_dtype != dtype) {
    SO_LOG(info) << "checkpoint " << directory.string() << " was written with [offload] optimizer_state_dtype = \""
                 << saved_dtype << "\"; its moments are converted to " << dtype
                 << (dtype == "bf16" ? " (rounded to nearest)" : " (exactly)");
  }
  const int rank = world_.rank();
  auto& layers = engine_.layers();
  // One buffer for the three fp32 arrays of the largest shard, reused by every layer: the
  // optimizer copies a layer's state into its own buffers (import_layer), and fresh buffers
  // per layer were fresh pages, each faulted in — a first touch of 12 bytes per parameter
  // (0.55B at 1 rank, 5.6 GB of checkpoint from the page cache: 4.4-4.6 s -> 2.2-2.6 s).
  int64_t largest = 0;
  for (const auto& layer : layers) largest = std::max(largest, layer.shard_numel());
  const auto scratch = at::empty({3 * largest}, at::kFloat);
  // Field f of layer l is read into the f-th third of the buffer.
  auto slot = [&](size_t field, size_t l) {
    return scratch.narrow(0, static_cast<int64_t>(field) * largest, layers[l].shard_numel());
  };
  if (!optimizer_.imports_by_field()) {
    for (size_t l = 0; l < layers.size(); ++l) {
      optim::ShardState state;
      for (size_t f = 0; f < kStateFields.size(); ++f) {
        auto& tensor = f == 0 ? state.master : f == 1 ? state.exp_avg : state.exp_avg_sq;
        tensor = slot(f, l);
        read_field(reader, layers[l], l, kStateFields[f], tensor);
      }
      state.steps = reader.steps(l);
      optimizer_.import_layer(l, state);
    }
  } else {
    import_reading_ahead(reader, slot);
  }
  const auto& training = reader.manifest().at("training");
  TrainingPosition position;
  position.step = training.at("step").get<int64_t>();
  position.skipped_steps = training.at("skipped_steps").get<int64_t>();
  position.sampler.epoch = training.at("sampler_epoch").get<int64_t>();
  position.sampler.batch = training.at("sampler_batch").get<int64_t>();
  position.evaluation = EvalTracker::from_json(reader.manifest().value("evaluation", nlohmann::json()));
  const int64_t saved_batch = training.at("global_batch_samples").get<int64_t>();
  if (saved_batch != global_batch_) {
    // The same samples consumed in this epoch, counted in the new global batch.
    const int64_t consumed = position.sampler.batch * saved_batch;
    position.sampler.batch = consumed / global_batch_;
    if (rank == 0 && consumed % global_batch_ != 0) {
      SO_LOG(warning) << "the global batch changed from " << saved_batch << " to " << global_batch_ << " samples: "
                      << consumed % global_batch_ << " samples of the epoch are seen again";
    }
  }
  // Per-rank state belongs to a rank of the same layout; at another world size (or another
  // split of the experts) it starts afresh.
  if (reader.world_size() == world_.size() &&
      reader.manifest().value("expert_parallel_size", int64_t{1}) == experts_split()) {
    set_cpu_rng_state(reader.rank_blob(rank, "rng_state"));
    const auto optimizer_state = reader.rank_blob(rank, "optimizer_state");
    try {
      optimizer_.import_rank_state(std::string(optimizer_state.begin(), optimizer_state.end()));
    } catch (const std::exception& e) {
      throw Error(directory.string() + ", rank " + std::to_string(rank) + ": " + e.what(),
                  "resume from an earlier checkpoint (--resume), or start afresh");
    }
  }
  return position;
}

}  // namespace superoffload::train
