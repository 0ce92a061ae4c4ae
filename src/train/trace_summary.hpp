// Where the time of traced steps went, read from a Kineto Chrome/Perfetto trace ([profile]
// trace_steps): the device-busy fraction of each step, the top kernels, every device-idle gap
// over a threshold with what the host was doing when it began, host<->device copies by
// direction and memory kind, and the synchronising calls named by the code they come from.
//
// "The device" is the timeline that computes: on a GPU, kernels, copies and sets on every
// stream; on a CPU run, the operators of the thread that runs the step (the one holding the
// "superoffload/step N" annotations), whose gaps are where it waited or did non-operator work.
// A step's window is its annotation's. Synchronising calls are, on a GPU, the runtime's
// synchronise calls, blocking copies and sets and pageable asynchronous copies; on a CPU, the
// operators that read a tensor's value on the host (item, nonzero, unique, masked_select), each
// of which synchronises on a GPU. Either way one call of our code counts once, however many
// runtime calls it makes, and is named by the innermost superoffload annotation around it
// ("superoffload/backward", layer numbers dropped) and the operator our code called.
//
// The summary is JSON (written beside the trace, into metrics.h5 /profile/trace, read by
// `inspect`) and formats as text for the log. Torch-free: it reads only the trace file.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace superoffload::train {

// The annotation that brackets a traced step: the prefix, then the 1-based step number.
inline constexpr const char* kTraceStepPrefix = "superoffload/step ";
// Our own annotations (TraceScope) start with this.
inline constexpr const char* kTraceScopePrefix = "superoffload/";

struct TraceSummaryOptions {
  double gap_threshold_ms = 0.5;  // device-idle gaps at least this long are listed
  size_t top_kernels = 15;
  size_t listed_gaps = 200;       // the longest gaps kept in the summary (all are counted)
  size_t listed_sync_sources = 40;
};

// The summary of a parsed trace (the object Kineto writes: {"traceEvents": [...], ...}).
// Throws superoffload::Error when the trace holds no step annotation.
nlohmann::json summarize_trace(const nlohmann::json& trace, const TraceSummaryOptions& options = {});

// The named figures of a summary, in a fixed order (NaN where a run has none, e.g. copies or
// the allocator on a CPU): a row of metrics.h5 /profile/trace/ranks, and rank 0's per-rank log.
std::vector<std::pair<std::string, double>> trace_figures(const nlohmann::json& summary);

// One rank's line beside rank 0's full summary: busy fraction, gaps, synchronisations per step.
std::string format_trace_rank_line(size_t rank, const nlohmann::json& summary);

// The text printed in the log and by `inspect`; `gaps` and `kernels` rows at most.
std::string format_trace_summary(const nlohmann::json& summary, size_t kernels = 10, size_t gaps = 10,
                                 size_t sync_sources = 10);

}  // namespace superoffload::train
