// MetricsRecorder.
#include "train/metrics_recorder.hpp"

#include <sys/resource.h>

#include <filesystem>

#include "io/metrics_file.hpp"
#include "runtime/check_mpi.hpp"
#include "runtime/mpi_world.hpp"

namespace superoffload::train {

namespace {

const std::vector<std::string> kTrainColumns = {
    "step", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "tflops", "mfu", "skipped", "rollbacks",
    "forward_s", "backward_s", "gather_wait_s", "reduce_s", "d2h_s", "cpu_step_s", "device_step_s", "h2d_s",
    "optimizer_wait_s", "rollback_s", "host_peak_rss_bytes", "peak_gathered_elements"};
// Per rank, for straggler analysis: [steps, world] each.
const std::vector<std::string> kRankColumns = {"step_time_s", "forward_s", "backward_s", "gather_wait_s", "reduce_s",
                                               "optimizer_s"};

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

}  // namespace

MetricsRecorder::MetricsRecorder(const config::Config& config, const runtime::MpiWorld& world, int64_t keep_through_step,
                                 const std::map<std::string, std::string>& attributes)
    : config_(config), world_(world) {
  if (config_.metrics.enabled && world_.rank() == 0) {
    file_ = std::make_unique<io::MetricsFile>(
        (std::filesystem::path(config_.training.output_dir) / "metrics.h5").string(), kTrainColumns, kRankColumns,
        world_.size(), keep_through_step, attributes);
  }
}

MetricsRecorder::~MetricsRecorder() = default;

void MetricsRecorder::record(const StepRecord& r) {
  if (!config_.metrics.enabled) return;
  const auto& o = r.offload;
  const double optimizer_s = o.d2h_s + o.cpu_step_s + o.device_step_s + o.h2d_s + o.wait_s + o.rollback_s;
  const double mine[] = {r.step_time_s, r.engine.forward_s, r.engine.backward_s, r.engine.gather_wait_s,
                         r.engine.reduce_s, optimizer_s};
  constexpr int columns = sizeof mine / sizeof mine[0];
  const int world = world_.size();
  std::vector<double> gathered(static_cast<size_t>(columns * world));
  SO_CHECK_MPI(MPI_Gather(mine, columns, MPI_DOUBLE, gathered.data(), columns, MPI_DOUBLE, 0, world_.world()));
  if (!file_) return;
  // Rank-major from the gather; the file wants column-major (a [world] row per column).
  std::vector<double> by_column(gathered.size());
  for (int k = 0; k < world; ++k) {
    for (int c = 0; c < columns; ++c) by_column[static_cast<size_t>(c * world + k)] = gathered[static_cast<size_t>(k * columns + c)];
  }
  file_->append({static_cast<double>(r.step), r.loss, r.lr, r.grad_norm, r.step_time_s, r.tokens_per_s, r.tflops, r.mfu,
                 r.skipped ? 1.0 : 0.0, static_cast<double>(r.rollbacks), r.engine.forward_s, r.engine.backward_s,
                 r.engine.gather_wait_s, r.engine.reduce_s, o.d2h_s, o.cpu_step_s, o.device_step_s, o.h2d_s, o.wait_s,
                 o.rollback_s, peak_rss_bytes(), static_cast<double>(r.peak_gathered_elements)},
                by_column);
  if (r.step % std::max<int64_t>(1, config_.metrics.flush_every_steps) == 0) file_->flush();
}

}  // namespace superoffload::train
