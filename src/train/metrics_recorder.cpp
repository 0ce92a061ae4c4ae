// MetricsRecorder.
#include "train/metrics_recorder.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <string_view>

#include "base/error.hpp"
#include "cluster/check_mpi.hpp"
#include "config/step_range.hpp"
#include "cluster/mpi_world.hpp"
#include "io/csv_monitor.hpp"
#include "io/metrics_file.hpp"
#include "io/tensorboard_writer.hpp"
#include "train/trace_summary.hpp"

namespace superoffload::train {

namespace {

using base::peak_rss_bytes;

// A metrics.h5 column: its name and how a step record gives its value.
struct Column {
  const char* name;
  double (*value)(const StepRecord&);
};

// /train: one row per step, written by rank 0.
const Column kTrainColumns[] = {
    {"step", [](const StepRecord& r) { return static_cast<double>(r.step); }},
    {"loss", [](const StepRecord& r) { return r.loss; }},
    {"lr", [](const StepRecord& r) { return r.lr; }},
    {"grad_norm", [](const StepRecord& r) { return r.grad_norm; }},
    // MoE runs with output_router_logits: HF's unweighted aux_loss (router_aux_loss_coef times
    // it is what training adds to `loss`); NaN otherwise.
    {"aux_loss", [](const StepRecord& r) { return r.aux_loss; }},
    {"step_time_s", [](const StepRecord& r) { return r.step_time_s; }},
    // Throughput (train/throughput.hpp): tokens processed, model FLOPs (no recomputation; MFU)
    // and hardware FLOPs (with recomputation; HFU, the SuperOffload examples' TFLOPS).
    {"tokens_per_s", [](const StepRecord& r) { return r.throughput.tokens_per_s; }},
    {"tokens_per_s_per_device", [](const StepRecord& r) { return r.throughput.tokens_per_s_per_device; }},
    {"model_tflops_per_device", [](const StepRecord& r) { return r.throughput.model_tflops_per_device; }},
    {"hardware_tflops_per_device", [](const StepRecord& r) { return r.throughput.hardware_tflops_per_device; }},
    {"mfu", [](const StepRecord& r) { return r.throughput.mfu; }},
    {"hfu", [](const StepRecord& r) { return r.throughput.hfu; }},
    {"skipped", [](const StepRecord& r) { return r.skipped ? 1.0 : 0.0; }},
    // SuperOffload's CPU sub-groups, summed over ranks (see optim::SpeculationCounts).
    {"speculated", [](const StepRecord& r) { return static_cast<double>(r.speculation.speculated); }},
    {"committed", [](const StepRecord& r) { return static_cast<double>(r.speculation.committed); }},
    {"replayed", [](const StepRecord& r) { return static_cast<double>(r.speculation.replayed); }},
    {"undone", [](const StepRecord& r) { return static_cast<double>(r.speculation.undone); }},
    {"stepped_late", [](const StepRecord& r) { return static_cast<double>(r.speculation.late); }},
    {"predicted_stops", [](const StepRecord& r) { return static_cast<double>(r.speculation.predicted_stops); }},
    {"mispredicted_stops", [](const StepRecord& r) { return static_cast<double>(r.speculation.mispredicted_stops); }},
    {"forward_s", [](const StepRecord& r) { return r.engine.forward_s; }},
    {"backward_s", [](const StepRecord& r) { return r.engine.backward_s; }},
    {"gather_wait_s", [](const StepRecord& r) { return r.engine.gather_wait_s; }},
    {"reduce_s", [](const StepRecord& r) { return r.engine.reduce_s; }},
    {"reduce_wait_s", [](const StepRecord& r) { return r.engine.reduce_wait_s; }},
    {"d2h_s", [](const StepRecord& r) { return r.optimizer.d2h_s; }},
    {"cpu_step_s", [](const StepRecord& r) { return r.optimizer.cpu_step_s; }},
    {"device_step_s", [](const StepRecord& r) { return r.optimizer.device_step_s; }},
    {"h2d_s", [](const StepRecord& r) { return r.optimizer.h2d_s; }},
    {"optimizer_wait_s", [](const StepRecord& r) { return r.optimizer.wait_s; }},
    {"rollback_s", [](const StepRecord& r) { return r.optimizer.rollback_s; }},
    {"norm_s", [](const StepRecord& r) { return r.optimizer.norm_s; }},
    {"host_peak_rss_bytes", [](const StepRecord&) { return peak_rss_bytes(); }},
    {"peak_gathered_elements", [](const StepRecord& r) { return static_cast<double>(r.peak_gathered_elements); }},
    // The most bytes LibTorch's caching allocator held during the step, on the rank that held
    // the most; on the CPU, its CPU allocations (train/cpu_allocations.hpp: what a GPU would
    // hold, not the host buffers the program maps itself). The plan's figure is the file
    // attribute planned_device_bytes.
    {"device_peak_bytes", [](const StepRecord& r) { return r.device_peak_bytes; }},
    // ... and the most it had reserved from the device (segments: allocated bytes plus the
    // fragmentation the allocator keeps), torch.cuda.max_memory_reserved. NaN on the CPU.
    {"device_reserved_peak_bytes", [](const StepRecord& r) { return r.device_reserved_peak_bytes; }},
    // resctrl's memory-bandwidth and cache-occupancy counters of the optimizer's threads and of
    // the rest of the ranks (GB/s over the step; bytes at its end), summed over the ranks that
    // monitor; NaN where nothing is monitored ([runtime] resctrl).
    {"optimizer_mem_gb_per_s", [](const StepRecord& r) { return r.optimizer_mem_gb_per_s; }},
    {"rest_mem_gb_per_s", [](const StepRecord& r) { return r.rest_mem_gb_per_s; }},
    {"optimizer_cache_bytes", [](const StepRecord& r) { return r.optimizer_cache_bytes; }},
    {"rest_cache_bytes", [](const StepRecord& r) { return r.rest_cache_bytes; }},
};

// /ranks: every rank's value, [steps, world] each, for straggler analysis.
const Column kRankColumns[] = {
    {"step_time_s", [](const StepRecord& r) { return r.step_time_s; }},
    {"forward_s", [](const StepRecord& r) { return r.engine.forward_s; }},
    {"backward_s", [](const StepRecord& r) { return r.engine.backward_s; }},
    {"gather_wait_s", [](const StepRecord& r) { return r.engine.gather_wait_s; }},
    {"reduce_s", [](const StepRecord& r) { return r.engine.reduce_s; }},
    {"optimizer_s", [](const StepRecord& r) { return r.optimizer.total(); }},
    {"speculated", [](const StepRecord& r) { return static_cast<double>(r.speculation.speculated); }},
    {"committed", [](const StepRecord& r) { return static_cast<double>(r.speculation.committed); }},
    {"replayed", [](const StepRecord& r) { return static_cast<double>(r.speculation.replayed); }},
    {"undone", [](const StepRecord& r) { return static_cast<double>(r.speculation.undone); }},
    {"stepped_late", [](const StepRecord& r) { return static_cast<double>(r.speculation.late); }},
    {"predicted_stops", [](const StepRecord& r) { return static_cast<double>(r.speculation.predicted_stops); }},
    {"mispredicted_stops", [](const StepRecord& r) { return static_cast<double>(r.speculation.mispredicted_stops); }},
    {"device_peak_bytes", [](const StepRecord& r) { return r.device_peak_bytes; }},
    {"device_reserved_peak_bytes", [](const StepRecord& r) { return r.device_reserved_peak_bytes; }},
    // Compared with the plan's host bytes per rank (file attribute planned_host_bytes).
    {"host_peak_rss_bytes", [](const StepRecord&) { return peak_rss_bytes(); }},
    {"optimizer_mem_gb_per_s", [](const StepRecord& r) { return r.optimizer_mem_gb_per_s; }},
    {"rest_mem_gb_per_s", [](const StepRecord& r) { return r.rest_mem_gb_per_s; }},
    {"optimizer_cache_bytes", [](const StepRecord& r) { return r.optimizer_cache_bytes; }},
    {"rest_cache_bytes", [](const StepRecord& r) { return r.rest_cache_bytes; }},
};

// What DeepSpeed's monitors get, under DeepSpeed's tags (its engine writes the first two).
struct MonitorSeries {
  const char* tag;
  double (*value)(const StepRecord&);
};
const MonitorSeries kMonitorSeries[] = {
    {"Train/Samples/train_loss", [](const StepRecord& r) { return r.loss; }},
    {"Train/Samples/lr", [](const StepRecord& r) { return r.lr; }},
    {"Train/Samples/grad_norm", [](const StepRecord& r) { return r.grad_norm; }},
    {"Train/Samples/aux_loss", [](const StepRecord& r) { return r.aux_loss; }},  // NaN (not written) when off
    {"Train/Samples/elapsed_time_ms_step", [](const StepRecord& r) { return 1000 * r.step_time_s; }},
    {"Train/Samples/tokens_per_s", [](const StepRecord& r) { return r.throughput.tokens_per_s; }},
    // resctrl's counters where monitored (NaN, not written, elsewhere); rank 0's groups.
    {"Train/Samples/optimizer_mem_gb_per_s", [](const StepRecord& r) { return r.optimizer_mem_gb_per_s; }},
    {"Train/Samples/rest_mem_gb_per_s", [](const StepRecord& r) { return r.rest_mem_gb_per_s; }},
    {"Train/Samples/optimizer_cache_bytes", [](const StepRecord& r) { return r.optimizer_cache_bytes; }},
    {"Train/Samples/rest_cache_bytes", [](const StepRecord& r) { return r.rest_cache_bytes; }},
};

// Every rank's value of a /ranks column (rank-major `gathered`, `columns` per rank).
std::vector<double> rank_values(const std::vector<double>& gathered, int columns, std::string_view name) {
  int column = 0;
  while (column < columns && kRankColumns[column].name != name) ++column;
  SO_CHECK(column < columns, "metrics: no per-rank column " << name);
  std::vector<double> out;
  for (size_t k = 0; k * static_cast<size_t>(columns) < gathered.size(); ++k) {
    out.push_back(gathered[k * static_cast<size_t>(columns) + static_cast<size_t>(column)]);
  }
  return out;
}

// The sum over the ranks that have a value; NaN when none has.
double rank_sum_known(const std::vector<double>& gathered, int columns, std::string_view name) {
  double sum = std::nan("");
  for (double v : rank_values(gathered, columns, name)) {
    if (!std::isnan(v)) sum = (std::isnan(sum) ? 0 : sum) + v;
  }
  return sum;
}

int64_t rank_sum(const std::vector<double>& gathered, int columns, std::string_view name) {
  double sum = 0;
  for (double v : rank_values(gathered, columns, name)) sum += v;
  return static_cast<int64_t>(sum);
}

template <size_t N>
std::vector<std::string> names(const Column (&columns)[N]) {
  std::vector<std::string> out;
  for (const auto& c : columns) out.emplace_back(c.name);
  return out;
}

}  // namespace

MetricsRecorder::MetricsRecorder(const config::Config& config, const cluster::MpiWorld& world, int64_t keep_through_step,
                                 const std::map<std::string, std::string>& attributes,
                                 const std::vector<std::string>& layers, const std::vector<std::string>& startup_phases)
    : config_(config), world_(world), startup_phases_(startup_phases) {
  if (config_.metrics.enabled && world_.rank() == 0) {
    // The profile's datasets exist from the start (SWMR creates nothing later), NaN until its step.
    std::vector<io::FixedDataset> fixed;
    if (config_.profile.step > keep_through_step) {
      nlohmann::json names_json = layers;
      std::string columns;
      for (const char* c : kProfileColumnNames) columns += (columns.empty() ? "" : ",") + std::string(c);
      const auto n = static_cast<hsize_t>(layers.size());
      fixed.push_back({"profile/seconds", {static_cast<hsize_t>(world_.size()), n, kProfileColumns},
                       {{"dims", "rank, layer, phase"}, {"phases", columns}, {"layers", names_json.dump()},
                        {"step", std::to_string(config_.profile.step)}}});
      for (const char* name : {"profile/parameters", "profile/model_flops", "profile/executed_flops",
                               "profile/achieved_tflops"}) {
        fixed.push_back({name, {n}, {{"layers", names_json.dump()}}});
      }
    }
    // The traced steps' summaries likewise, empty until the last traced step.
    std::string problem;
    if (const auto traced = config::parse_step_range(config_.profile.trace_steps, problem);
        traced && traced->last > keep_through_step) {
      std::string figures;
      for (const auto& [name, value] : trace_figures(nlohmann::json::object())) figures += (figures.empty() ? "" : ",") + name;
      fixed.push_back({"profile/trace/ranks", {static_cast<hsize_t>(world_.size()), trace_figures({}).size()},
                       {{"dims", "rank, figure"}, {"figures", figures}, {"steps", config_.profile.trace_steps}}});
      fixed.push_back({"profile/trace/summaries", {}, {{"format", "JSON array, one summary per rank (UTF-8 bytes)"}}, true});
    }
    // The start-up timeline, NaN until step 1 (a run with no step left to train keeps NaN).
    if (!startup_phases.empty()) {
      const std::string names = nlohmann::json(startup_phases).dump();
      const auto n = static_cast<hsize_t>(startup_phases.size());
      fixed.push_back({"startup/seconds", {n}, {{"phases", names}, {"from", "the process's start to the end of step 1"}}});
      fixed.push_back({"startup/slowest_rank_seconds", {n}, {{"phases", names}}});
      fixed.push_back({"startup/rss_growth_bytes", {n}, {{"phases", names}, {"of", "the peak resident memory, rank 0"}}});
      fixed.push_back({"startup/bytes_read", {n}, {{"phases", names}}});
    }
    file_ = std::make_unique<io::MetricsFile>(
        (std::filesystem::path(config_.training.output_dir) / "metrics.h5").string(), names(kTrainColumns), names(kRankColumns),
        world_.size(), keep_through_step, attributes, std::move(fixed),
        std::vector<std::string>{"step", "loss", "tokens", "seconds"});
  }
  const auto& m = config_.metrics;
  if ((m.tensorboard || m.csv) && world_.rank() == 0) {
    const auto directory = std::filesystem::path(m.output_path.empty() ? config_.training.output_dir : m.output_path) /
                           m.job_name;
    if (m.tensorboard) tensorboard_ = std::make_unique<io::TensorBoardWriter>(directory);
    if (m.csv) csv_ = std::make_unique<io::CsvMonitor>(directory);
  }
}

MetricsRecorder::~MetricsRecorder() = default;

void MetricsRecorder::record(const StepRecord& r) {
  // The monitors are rank 0's alone (the loss and lr are the same on every rank).
  if (world_.rank() == 0) {
    const int64_t samples = r.step * config_.training.train_batch_size;  // DeepSpeed's monitors count samples
    const double wall_time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (const auto& series : kMonitorSeries) {
      if (std::isnan(series.value(r))) continue;  // a series this run has not (aux_loss of a dense model)
      if (tensorboard_) tensorboard_->scalar(series.tag, series.value(r), samples, wall_time);
      if (csv_) csv_->write(series.tag, series.value(r), samples);
    }
  }
  if (!config_.metrics.enabled) {
    if (r.step % std::max<int64_t>(1, config_.metrics.flush_every_steps) == 0) flush();
    return;
  }
  std::vector<double> mine;
  for (const auto& c : kRankColumns) mine.push_back(c.value(r));
  const int columns = static_cast<int>(mine.size());
  const int world = world_.size();
  std::vector<double> gathered(static_cast<size_t>(columns * world));
  SO_CHECK_MPI(MPI_Gather(mine.data(), columns, MPI_DOUBLE, gathered.data(), columns, MPI_DOUBLE, 0, world_.world()));
  if (!file_) return;
  // Rank-major from the gather; the file wants column-major (a [world] row per column).
  std::vector<double> by_column(gathered.size());
  for (int k = 0; k < world; ++k) {
    for (int c = 0; c < columns; ++c) by_column[static_cast<size_t>(c * world + k)] = gathered[static_cast<size_t>(k * columns + c)];
  }
  StepRecord total = r;
  total.speculation = {.speculated = rank_sum(gathered, columns, "speculated"),
                       .committed = rank_sum(gathered, columns, "committed"),
                       .replayed = rank_sum(gathered, columns, "replayed"),
                       .undone = rank_sum(gathered, columns, "undone"),
                       .late = rank_sum(gathered, columns, "stepped_late"),
                       .predicted_stops = rank_sum(gathered, columns, "predicted_stops"),
                       .mispredicted_stops = rank_sum(gathered, columns, "mispredicted_stops")};
  // The largest device peak of any rank (NaN stays NaN: a CPU run has none).
  for (double peak : rank_values(gathered, columns, "device_peak_bytes")) {
    if (peak > total.device_peak_bytes) total.device_peak_bytes = peak;
  }
  for (double peak : rank_values(gathered, columns, "device_reserved_peak_bytes")) {
    if (peak > total.device_reserved_peak_bytes) total.device_reserved_peak_bytes = peak;
  }
  total.optimizer_mem_gb_per_s = rank_sum_known(gathered, columns, "optimizer_mem_gb_per_s");
  total.rest_mem_gb_per_s = rank_sum_known(gathered, columns, "rest_mem_gb_per_s");
  total.optimizer_cache_bytes = rank_sum_known(gathered, columns, "optimizer_cache_bytes");
  total.rest_cache_bytes = rank_sum_known(gathered, columns, "rest_cache_bytes");
  std::vector<double> row;
  for (const auto& c : kTrainColumns) row.push_back(c.value(total));
  file_->append(row, by_column);
  if (r.step % std::max<int64_t>(1, config_.metrics.flush_every_steps) == 0) flush();
}

void MetricsRecorder::record_eval(const EvalRecord& r) {
  if (world_.rank() != 0) return;
  const int64_t samples = r.step * config_.training.train_batch_size;
  const double wall_time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  // A non-finite eval loss is in /eval as it is; the monitors get only finite values.
  if (std::isfinite(r.loss)) {
    for (const auto& [tag, value] : {std::pair{"Eval/Samples/eval_loss", r.loss},
                                     std::pair{"Eval/Samples/eval_ppl", std::exp(r.loss)}}) {
      if (tensorboard_) tensorboard_->scalar(tag, value, samples, wall_time);
      if (csv_) csv_->write(tag, value, samples);
    }
  }
  if (file_) {
    file_->append_eval({static_cast<double>(r.step), r.loss, static_cast<double>(r.tokens), r.seconds});
  }
  flush();  // evaluations are rare and the curve is what a reader follows
}

void MetricsRecorder::record_profile(const LayerProfile& p) {
  if (!file_) return;
  file_->write_fixed("profile/seconds", p.seconds);
  file_->write_fixed("profile/parameters", p.parameters);
  file_->write_fixed("profile/model_flops", p.model_flops);
  file_->write_fixed("profile/executed_flops", p.executed_flops);
  std::vector<double> tflops;
  for (size_t l = 0; l < p.layers.size(); ++l) tflops.push_back(p.achieved_tflops(l));
  file_->write_fixed("profile/achieved_tflops", tflops);
  file_->flush();
}

void MetricsRecorder::record_trace(const std::vector<nlohmann::json>& summaries) {
  if (!file_) return;
  std::vector<double> rows;
  for (const auto& summary : summaries) {
    for (const auto& [name, value] : trace_figures(summary)) rows.push_back(value);
  }
  file_->write_fixed("profile/trace/ranks", rows);
  file_->write_text("profile/trace/summaries", nlohmann::json(summaries).dump());
  file_->flush();
}

void MetricsRecorder::record_startup(const std::vector<base::StartupPhase>& phases,
                                     const std::vector<double>& slowest_rank_seconds) {
  if (!file_ || startup_phases_.empty()) return;
  std::vector<double> seconds, slowest, rss, bytes;
  for (const auto& name : startup_phases_) {
    // By name: the phases the file was made for (one that did not happen reads NaN).
    const auto found = std::find_if(phases.begin(), phases.end(), [&](const base::StartupPhase& p) { return p.name == name; });
    const bool known = found != phases.end();
    const auto k = static_cast<size_t>(found - phases.begin());
    seconds.push_back(known ? found->cost.seconds : std::nan(""));
    slowest.push_back(known && k < slowest_rank_seconds.size() ? slowest_rank_seconds[k] : std::nan(""));
    rss.push_back(known ? found->cost.rss_growth_bytes : std::nan(""));
    bytes.push_back(known ? found->bytes : std::nan(""));
  }
  file_->write_fixed("startup/seconds", seconds);
  file_->write_fixed("startup/slowest_rank_seconds", slowest);
  file_->write_fixed("startup/rss_growth_bytes", rss);
  file_->write_fixed("startup/bytes_read", bytes);
  file_->flush();
}

void MetricsRecorder::flush() {
  if (file_) file_->flush();
  if (tensorboard_) tensorboard_->flush();
  if (csv_) csv_->flush();
}

}  // namespace superoffload::train
