// Checkpoints of a training run: the optimizer's shard state of every layer, the position in
// the data and the step, the RNG state, and a manifest that lets a run at another world size
// load it (see io/checkpoint_files.hpp for the layout and the integrity rules).
#pragma once

#include <mpi.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <exception>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "data/sampler.hpp"
#include "train/eval_tracker.hpp"

namespace superoffload::cluster {
class MpiWorld;
}
namespace superoffload::zero {
class ZeroEngine;
}
namespace superoffload::io {
class CheckpointReader;
}
namespace superoffload::optim {
class Optimizer;
struct ShardState;
}

namespace superoffload::train {

// Where a run stands between two steps.
struct TrainingPosition {
  int64_t step = 0;  // optimizer steps completed
  data::SamplerPosition sampler;
  int64_t skipped_steps = 0;
  EvalTrackerState evaluation;  // the best eval loss so far and the early-stopping count
};

class TrainingCheckpoints {
 public:
  // `model` describes the model in the manifest (path, architecture, plugin, parameters).
  TrainingCheckpoints(const config::Config& config, zero::ZeroEngine& engine, optim::Optimizer& optimizer,
                      const cluster::MpiWorld& world, nlohmann::json model);

  std::filesystem::path root() const { return root_; }
  // Where a run with `config` keeps its checkpoints (<output_dir>/checkpoints).
  static std::filesystem::path root_of(const config::Config& config);
  // Hears what a save is doing (layer by layer), e.g. for the watchdog.
  void on_progress(std::function<void(const std::string&)> progress) { progress_ = std::move(progress); }
  ~TrainingCheckpoints();
  // Which save: a periodic one may fail [checkpoint] max_failed_saves times in a row while
  // training goes on; the last one (end of training, preemption) must succeed.
  enum class Kind { periodic, last };
  // Collective. Logs where, how big and how long on rank 0. A periodic save with [checkpoint]
  // async_save copies the state and a writer thread writes it while training goes on;
  // otherwise the save is complete when this returns. A save waits for the previous one.
  // Throws when a save fails and may not (see Kind).
  // `best`: this step's evaluation found the lowest eval loss so far ([checkpoint] keep_best):
  // checkpoints/best names it once complete, and keep_last never deletes it.
  void save(const TrainingPosition& position, Kind kind, bool best = false);
  // Waits for a background save; rethrows its error unless a failed save may be tolerated.
  void wait();
  // Throws when the most recent save failed (tolerated then): at the end of a run, whose state
  // would otherwise be lost without an error.
  void require_last_saved() const;
  // Collective. `request`: "latest" or a checkpoint directory. Restores the optimizer state
  // (resharded when the world size differs), the RNG state and the position; nullopt when
  // "latest" finds no checkpoint. Refuses a checkpoint of another model, naming the difference.
  std::optional<TrainingPosition> resume(const std::string& request);

 private:
  void check_model_matches(const nlohmann::json& manifest, const std::filesystem::path& directory) const;
  void check_run_unchanged(const nlohmann::json& manifest, const std::filesystem::path& directory) const;
  // Reads the checkpoint `reader` opened (at `directory`) into the optimizer and returns where
  // training continues. Not collective.
  TrainingPosition load_from(io::CheckpointReader& reader, const std::filesystem::path& directory);
  // Reads every layer's state on a thread of its own while this one imports it field by field;
  // slot(field, layer): where that field is read ([shard_numel] fp32), a third of one buffer.
  void import_reading_ahead(io::CheckpointReader& reader, const std::function<at::Tensor(size_t, size_t)>& slot);
  // Tests only: fails one import where SUPEROFFLOAD_TEST_FAIL_IMPORT names this rank and layer.
  void fail_import_for_a_test(size_t layer, size_t field) const;
  // Collective: ends the job when a shard holds NaN or inf (see the definition).
  void refuse_non_finite_weights(int64_t step);
  // Collective, once: under expert parallelism, where every rank's shard of each layer lies in
  // the layer's full flat layout (manifest "placement", per rank [[begin, shard offset,
  // length], ...]), for readers at any world and expert-parallel size. Null without it
  // (rank k holds [k·shard, (k+1)·shard), the reader's default).
  const nlohmann::json& placement();
  // [moe] expert_parallel_size as this run's layers are partitioned (1 for a dense model).
  int64_t experts_split() const;
  nlohmann::json placement_;
  bool placement_known_ = false;
  const config::Config& config_;
  zero::ZeroEngine& engine_;
  optim::Optimizer& optimizer_;
  const cluster::MpiWorld& world_;
  nlohmann::json model_;
  std::filesystem::path root_;
  int64_t global_batch_;
  std::function<void(const std::string&)> progress_;
  // Collective (every rank gets the same failure): logs a failed periodic save and goes on, or
  // rethrows it when max_failed_saves saves in a row have failed.
  void tolerate_or_rethrow(std::exception_ptr failure);
  int64_t failed_in_a_row_ = 0;
  std::string last_failure_;
  // The background writer and its own communicator (its collectives must not mix with the
  // training thread's).
  std::thread writer_;
  std::exception_ptr writer_error_;
  MPI_Comm writer_comm_ = MPI_COMM_NULL;
};

}  // namespace superoffload::train
