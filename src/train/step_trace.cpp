// StepTracer.
#include "train/step_trace.hpp"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string_view>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "train/trace_summary.hpp"

namespace superoffload::train {
namespace {

namespace fs = std::filesystem;
namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

std::set<ActivityType> activities_for(at::Device device) {
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  return activities;
}

ProfilerConfig profiler_config() {
  // Shapes, stacks and memory events would multiply the trace's size; the summary needs none.
  return ProfilerConfig(ProfilerState::KINETO, /*report_input_shapes=*/false, /*profile_memory=*/false,
                        /*with_stack=*/false, /*with_flops=*/false, /*with_modules=*/false);
}

}  // namespace

StepTracer::StepTracer(const config::ProfileConfig& profile, at::Device device, int rank, const fs::path& output_dir,
                       int64_t resumed_step, int64_t total_steps)
    : device_(device), rank_(rank), directory_(output_dir / "traces") {
  std::string problem;
  const auto range = config::parse_step_range(profile.trace_steps, problem);
  SO_CHECK(problem.empty(), "[profile] trace_steps = " << problem);  // the config check said so already
  if (!range) return;
  if (range->last <= resumed_step || range->first > total_steps) {
    if (rank_ == 0) {
      SO_LOG(warning) << "[profile] trace_steps = \"" << profile.trace_steps << "\" traces nothing: this run trains steps "
                      << resumed_step + 1 << " to " << total_steps;
    }
    return;
  }
  range_ = config::StepRange{std::max(range->first, resumed_step + 1), std::min(range->last, total_steps)};
  if (rank_ == 0 && (range_->first != range->first || range_->last != range->last)) {
    SO_LOG(warning) << "[profile] trace_steps = \"" << profile.trace_steps << "\": this run trains steps " << resumed_step + 1
                    << " to " << total_steps << ", so steps " << range_->first << "-" << range_->last << " are traced";
  }
  fs::create_directories(directory_);
}

StepTracer::~StepTracer() {
  if (!running_) return;
  try {
    window_.reset();
    stop_and_save();
    if (rank_ == 0) {
      SO_LOG(warning) << "the trace of steps " << range_->first << "-" << range_->last
                      << " ended before its last step; saved as far as it went in " << trace_path().string();
    }
  } catch (const std::exception& e) {
    // A destructor cannot fail the run; the run's own error, if any, is what matters.
    SO_LOG(warning) << "the cut-short trace could not be saved: " << e.what();
  }
}

fs::path StepTracer::trace_path() const {
  if (!range_) return {};
  return directory_ / ("rank_" + std::to_string(rank_) + ".steps_" + std::to_string(range_->first) + "-" +
                       std::to_string(range_->last) + ".pt.trace.json");
}

std::map<std::string, int64_t> StepTracer::allocator_counts() const {
  if (device_.is_cpu()) return {};
  const auto stats = c10::getDeviceAllocator(device_.type())->getDeviceStats(device_.index());
  return {{"retries", stats.num_alloc_retries},
          {"device_allocs", stats.num_device_alloc},
          {"device_frees", stats.num_device_free},
          {"sync_all_streams", stats.num_sync_all_streams},
          {"ooms", stats.num_ooms}};
}

void StepTracer::begin_step(int64_t step) {
  if (!range_ || !range_->contains(step)) return;
  if (step == range_->first) {
    // Kineto looks for GPUs even when asked for CPU activities only, and logs an error for
    // each rank when there are none: noise on a CPU run, so its errors are kept for GPU runs
    // (unless the user set the level).
    if (device_.is_cpu()) setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
    const auto config = profiler_config();
    const auto activities = activities_for(device_);
    profiler::prepareProfiler(config, activities);
    profiler::enableProfiler(config, activities);
    running_ = true;
    allocator_before_ = allocator_counts();
  }
  window_.emplace(at::RecordScope::USER_SCOPE);
  if (window_->isActive()) window_->before(std::string(kTraceStepPrefix) + std::to_string(step));
}

std::optional<nlohmann::json> StepTracer::end_step(int64_t step) {
  if (!range_ || !range_->contains(step)) return std::nullopt;
  window_.reset();
  if (step != range_->last) return std::nullopt;
  // The device's last kernels belong in the trace (outside every step's window).
  if (!device_.is_cpu()) c10::impl::getDeviceGuardImpl(device_.type())->synchronizeDevice(device_.index());
  const auto after = allocator_counts();
  nlohmann::json summary;
  try {
    // A trace that cannot be written (a full disk) or summarised is no reason to end the run;
    // the summary says what went wrong, on every rank alike (rank 0 gathers them next).
    stop_and_save();
    std::ifstream in(trace_path());
    SO_CHECK(in, "cannot read " << trace_path().string() << " back");
    summary = summarize_trace(nlohmann::json::parse(in));
  } catch (const std::exception& e) {
    summary = {{"error", std::string("the trace could not be saved or summarised: ") + e.what()}};
  }
  if (!device_.is_cpu()) {
    nlohmann::json counts;
    for (const auto& [name, value] : after) counts[name] = value - allocator_before_[name];
    summary["allocator"] = counts;
  }
  summary["rank"] = rank_;
  summary["trace"] = trace_path().string();
  auto summary_path = trace_path().string();
  summary_path.replace(summary_path.size() - std::string_view(".pt.trace.json").size(), std::string::npos, ".summary.json");
  std::ofstream out(summary_path);
  out << summary.dump(1) << "\n";
  if (!out) SO_LOG(warning) << "cannot write " << summary_path << ": the summary is in the log and metrics.h5";
  return summary;
}

void StepTracer::stop_and_save() {
  running_ = false;
  auto result = profiler::disableProfiler();
  SO_CHECK(result, "the Kineto profiler returned no result for the trace of steps " << range_->first << "-" << range_->last);
  // Written aside and renamed: a reader never sees half a trace.
  const auto path = trace_path();
  const auto partial = fs::path(path.string() + ".partial");
  result->save(partial.string());
  SO_CHECK(fs::exists(partial), "the Kineto profiler wrote no trace to " << partial.string()
                                                                          << hint("check the free space of the run directory"));
  fs::rename(partial, path);
}

}  // namespace superoffload::train
