// Feeds <output_dir>/metrics.h5: every rank's step and phase times are gathered to rank 0,
// which appends one row per step (see io/metrics_file.hpp) and flushes every
// [metrics] flush_every_steps steps so readers see the run as it goes. With [metrics]
// tensorboard or csv, rank 0 also feeds DeepSpeed's monitors the same values under DeepSpeed's
// tags (Train/Samples/train_loss, Train/Samples/lr, ...), against samples seen as DeepSpeed
// does; evaluations go to /eval and to the monitors as Eval/Samples/eval_loss and eval_ppl.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/startup_timeline.hpp"
#include "config/config.hpp"
#include "optim/step_outcome.hpp"
#include "train/layer_profile.hpp"
#include "train/throughput.hpp"
#include "zero/engine_stats.hpp"

namespace superoffload::io {
class MetricsFile;
class TensorBoardWriter;
class CsvMonitor;
}
namespace superoffload::cluster {
class MpiWorld;
}

namespace superoffload::train {

struct StepRecord {
  int64_t step = 0;  // 1-based: the step just completed
  double loss = 0, lr = 0, grad_norm = 0, step_time_s = 0;
  double aux_loss = 0;  // MoE load balancing, HF's aux_loss mean over the global batch (NaN when off)
  Throughput throughput;
  bool skipped = false;
  optim::SpeculationCounts speculation;  // this rank's; /train holds the sums over ranks
  zero::PhaseTimes engine;
  optim::OptimizerTimes optimizer;
  int64_t peak_gathered_elements = 0;
  double device_peak_bytes = 0;  // this rank's caching-allocator peak in the step (on the CPU, that of
                                 // LibTorch's counted allocations); /train holds the largest over ranks
  double device_reserved_peak_bytes = 0;  // the same for the bytes the allocator reserved
  // resctrl's counters of this rank's groups (train/cache_partition.hpp), NaN where it has none;
  // /train holds the sums over the ranks that have them.
  double optimizer_mem_gb_per_s = std::nan(""), rest_mem_gb_per_s = std::nan("");
  double optimizer_cache_bytes = std::nan(""), rest_cache_bytes = std::nan("");
};

// One evaluation of the validation data (train/validation.hpp), after `step` (0: before the first).
struct EvalRecord {
  int64_t step = 0;
  double loss = 0;
  int64_t tokens = 0;
  double seconds = 0;
};

class MetricsRecorder {
 public:
  // Collective. `keep_through_step`: the step a resumed run starts from. `layers`: the
  // model's layer names (the /profile datasets of [profile] step).
  MetricsRecorder(const config::Config& config, const cluster::MpiWorld& world, int64_t keep_through_step,
                  const std::map<std::string, std::string>& attributes, const std::vector<std::string>& layers,
                  const std::vector<std::string>& startup_phases = {});
  ~MetricsRecorder();
  // Collective (a gather of per-rank times).
  void record(const StepRecord& record);
  // Rank 0 appends it to /eval (step, loss, tokens, seconds) and gives the monitors
  // Eval/Samples/eval_loss and eval_ppl. Not collective.
  void record_eval(const EvalRecord& record);
  // Rank 0 writes the profile to /profile (the step's rows are recorded as usual).
  void record_profile(const LayerProfile& profile);
  // Rank 0 writes the traced steps' summaries, one per rank (train/step_trace.hpp), to
  // /profile/trace: `ranks` [world, figures] and `summaries`, the JSON array as text.
  void record_trace(const std::vector<nlohmann::json>& summaries);
  // Rank 0 writes the start-up timeline (base/startup_timeline.hpp) to /startup: per phase
  // (the `phases` attribute) seconds, the slowest rank's seconds, peak-RSS growth and bytes read.
  void record_startup(const std::vector<base::StartupPhase>& phases, const std::vector<double>& slowest_rank_seconds);
  // Rank 0 writes every row so far to disk: called at each checkpoint, so that a crash never
  // loses the metrics of steps a resume will not run again.
  void flush();

 private:
  const config::Config& config_;
  const cluster::MpiWorld& world_;
  std::vector<std::string> startup_phases_;
  std::unique_ptr<io::MetricsFile> file_;  // rank 0
  std::unique_ptr<io::TensorBoardWriter> tensorboard_;  // rank 0, [metrics] tensorboard
  std::unique_ptr<io::CsvMonitor> csv_;                 // rank 0, [metrics] csv
};

}  // namespace superoffload::train
