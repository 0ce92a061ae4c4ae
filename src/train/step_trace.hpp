// [profile] trace_steps: the steps named are recorded with LibTorch's Kineto profiler (what
// torch.profiler uses) on every rank: CPU operators and our own spans (zero/trace_scope.hpp),
// and on a GPU its kernels, copies and runtime calls through CUPTI. After the last of them each
// rank saves a Chrome/Perfetto trace, <output_dir>/traces/rank_<R>.steps_<A>-<B>.pt.trace.json
// (chrome://tracing, ui.perfetto.dev, TensorBoard's profiler plugin), summarises it
// (train/trace_summary.hpp) beside it as .summary.json, adds the caching allocator's counts
// over the traced steps, and rank 0 gathers every rank's summary for the log and metrics.h5.
//
// A step's window opens before its data is read and closes when its optimizer step has
// returned; the device is then synchronised outside the window, so that its last kernels are in
// the trace and the synchronisation is not counted as the step's.
#pragma once

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "config/config.hpp"
#include "config/step_range.hpp"

namespace superoffload::train {

class StepTracer {
 public:
  // Traces nothing unless [profile] trace_steps names a step after `resumed_step`; warns (on
  // rank 0) when the steps lie past `total_steps` or before the resumed step.
  StepTracer(const config::ProfileConfig& profile, at::Device device, int rank, const std::filesystem::path& output_dir,
             int64_t resumed_step, int64_t total_steps);
  // A trace cut short (the run stopped early, or an error): saved as far as it went.
  ~StepTracer();
  StepTracer(const StepTracer&) = delete;
  StepTracer& operator=(const StepTracer&) = delete;

  bool enabled() const { return range_.has_value(); }
  // Around every step (1-based): starts the profiler at the first traced step, opens its window.
  void begin_step(int64_t step);
  // Closes the window; after the last traced step stops the profiler, saves the trace and
  // returns this rank's summary (with "error" instead when the trace could not be summarised).
  std::optional<nlohmann::json> end_step(int64_t step);

  std::filesystem::path trace_path() const;

 private:
  void stop_and_save();
  std::map<std::string, int64_t> allocator_counts() const;

  std::optional<config::StepRange> range_;
  at::Device device_;
  int rank_;
  std::filesystem::path directory_;
  bool running_ = false;
  std::optional<at::RecordFunction> window_;  // the open step's annotation
  std::map<std::string, int64_t> allocator_before_;
};

}  // namespace superoffload::train
