// summarize_trace and format_trace_summary.
#include "train/trace_summary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/error.hpp"

namespace superoffload::train {
namespace {

using nlohmann::json;

enum class Kind { cpu_op, annotation, runtime, kernel, memcpy, memset, other };

Kind kind_of(std::string_view cat) {
  if (cat == "cpu_op" || cat == "operator") return Kind::cpu_op;
  if (cat == "user_annotation") return Kind::annotation;
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "runtime") return Kind::runtime;
  if (cat == "kernel") return Kind::kernel;
  if (cat == "gpu_memcpy") return Kind::memcpy;
  if (cat == "gpu_memset") return Kind::memset;
  return Kind::other;
}

bool on_device(Kind k) { return k == Kind::kernel || k == Kind::memcpy || k == Kind::memset; }
bool on_host(Kind k) { return k == Kind::cpu_op || k == Kind::annotation || k == Kind::runtime; }

struct Event {
  std::string name;
  Kind kind = Kind::other;
  double start = 0, end = 0;  // µs, as the trace has them
  std::string thread;         // "pid/tid"
  int64_t correlation = -1;
  double bytes = 0;
  long parent = -1;  // index of the enclosing host event on the same thread
};

// Nested events may overrun their parent by the trace's rounding of µs.
constexpr double kNestingSlackUs = 0.002;

std::string id_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// "superoffload/backward#12" -> "superoffload/backward": the source, whatever the layer.
std::string without_index(const std::string& scope) {
  const auto hash = scope.rfind('#');
  return hash == std::string::npos ? scope : scope.substr(0, hash);
}

std::string shortened(const std::string& name, size_t most = 160) {
  return name.size() <= most ? name : name.substr(0, most - 3) + "...";
}

struct Interval {
  double start, end;
};

std::vector<Interval> merged(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> out;
  for (const auto& i : v) {
    if (!out.empty() && i.start <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

// The host events of each thread, sorted by start (outer before inner), with parents.
class HostThreads {
 public:
  explicit HostThreads(std::vector<Event>& events) : events_(events) {
    for (size_t i = 0; i < events.size(); ++i) {
      if (on_host(events[i].kind)) by_thread_[events[i].thread].push_back(static_cast<long>(i));
    }
    for (auto& [thread, list] : by_thread_) {
      std::sort(list.begin(), list.end(), [&](long a, long b) {
        const auto &x = events[static_cast<size_t>(a)], &y = events[static_cast<size_t>(b)];
        return x.start != y.start ? x.start < y.start : x.end > y.end;
      });
      std::vector<long> stack;
      for (long i : list) {
        auto& e = events[static_cast<size_t>(i)];
        while (!stack.empty()) {
          const auto& top = events[static_cast<size_t>(stack.back())];
          if (e.start < top.end && e.end <= top.end + kNestingSlackUs) break;
          stack.pop_back();
        }
        e.parent = stack.empty() ? -1 : stack.back();
        stack.push_back(i);
      }
    }
  }

  // The innermost event of `thread` around time t that satisfies `accept`, or -1. The
  // innermost event around t is an ancestor of (or is) the last event started by t.
  template <class Accept>
  long around(const std::string& thread, double t, Accept accept) const {
    const auto it = by_thread_.find(thread);
    if (it == by_thread_.end()) return -1;
    const auto& list = it->second;
    auto pos = std::upper_bound(list.begin(), list.end(), t,
                                [&](double time, long i) { return time < events_[static_cast<size_t>(i)].start; });
    if (pos == list.begin()) return -1;
    for (long i = *std::prev(pos); i >= 0; i = events_[static_cast<size_t>(i)].parent) {
      const auto& e = events_[static_cast<size_t>(i)];
      if (e.end >= t && accept(e)) return i;
    }
    return -1;
  }

  // The last operator of `thread` that ended by time t (the host's work before an idle gap).
  long last_operator_before(const std::string& thread, double t) const {
    const auto it = by_thread_.find(thread);
    if (it == by_thread_.end()) return -1;
    const auto& list = it->second;
    auto pos = std::upper_bound(list.begin(), list.end(), t,
                                [&](double time, long i) { return time < events_[static_cast<size_t>(i)].start; });
    // Looking back a bounded number of events: the operator that ended the busy stretch
    // before a gap started shortly before it.
    long best = -1;
    for (size_t looked = 0; pos != list.begin() && looked < 4096; ++looked) {
      const long i = *--pos;
      const auto& e = events_[static_cast<size_t>(i)];
      if (e.kind == Kind::cpu_op && e.end <= t && (best < 0 || e.end > events_[static_cast<size_t>(best)].end)) best = i;
    }
    return best;
  }

 private:
  std::vector<Event>& events_;
  std::map<std::string, std::vector<long>> by_thread_;
};

bool is_scope(const Event& e) { return e.kind == Kind::annotation && starts_with(e.name, kTraceScopePrefix) && !starts_with(e.name, kTraceStepPrefix); }

// Runtime calls after which the host has waited for the device.
bool synchronising_runtime_call(const std::string& name) {
  static const char* const kNames[] = {
      "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
      "cudaMemcpy2D",          "cudaMemcpyToSymbol",    "cudaMemcpyFromSymbol", "cudaMemset",
      "cuStreamSynchronize",   "cuCtxSynchronize",      "cuEventSynchronize",   "cuMemcpyDtoH_v2",
      "cuMemcpyHtoD_v2",       "cuMemcpy"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

// Operators that read a tensor's values on the host: each synchronises on a GPU.
bool host_reading_operator(const std::string& name) {
  static const char* const kNames[] = {"aten::_local_scalar_dense", "aten::nonzero", "aten::_unique",
                                       "aten::_unique2", "aten::unique_consecutive", "aten::unique_dim",
                                       "aten::masked_select"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

// Operators that read a value on the host through one of those (item, a tensor's truth value).
bool host_reading_wrapper(const std::string& name) {
  static const char* const kNames[] = {"aten::item", "aten::is_nonzero", "aten::equal", "aten::allclose",
                                       "aten::unique", "aten::nonzero_numpy"};
  return host_reading_operator(name) ||
         std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

// "Memcpy HtoD (Pinned -> Device)" -> {"HtoD", "pinned"}.
std::pair<std::string, std::string> copy_kind(const std::string& name) {
  std::string direction = "other";
  for (const char* d : {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "DtoA", "AtoD"}) {
    if (name.find(d) != std::string::npos) {
      direction = d;
      break;
    }
  }
  const std::string memory = name.find("Pageable") != std::string::npos ? "pageable"
                             : name.find("Pinned") != std::string::npos ? "pinned"
                             : name.find("Managed") != std::string::npos ? "managed"
                                                                         : "device";
  return {direction, memory};
}

// The class of a GPU kernel, or of a CPU operator, by its name: where the time of a step went
// beyond the top list (the H200's first traces left a third of kernel time in 59 kernels
// below it). First match wins: casts and copies are elementwise kernels by name too.
std::string kernel_class(const std::string& name, bool gpu) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto has = [&n](std::initializer_list<const char*> parts) {
    return std::any_of(parts.begin(), parts.end(), [&n](const char* p) { return n.find(p) != std::string::npos; });
  };
  if (has({"nccl"})) return "communication";
  if (has({"flash", "fmha", "sdpa", "attention", "attn"})) return "attention";
  if (gpu ? has({"gemm", "nvjet", "cutlass", "xmma", "cublas", "grouped_mm", "splitk"})
          : has({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear", "grouped_mm"})) {
    return "matrix products";
  }
  if (has({"multi_tensor_apply", "fused_adam", "adamw"})) return "optimizer";
  if (has({"cross_entropy", "nll_loss", "log_softmax", "logsoftmax"})) return "loss";
  if (has({"copy", "cat", "gather", "scatter", "index", "transpose", "contiguous", "aten::to", "clone", "fill", "zero"})) {
    return "copies, casts and indexing";
  }
  if (has({"reduce", "norm", "softmax", "sum", "mean", "max"})) return "reductions and norms";
  if (has({"elementwise", "aten::mul", "aten::add", "aten::sub", "aten::div", "silu", "neg", "rsqrt", "pow", "exp", "where"})) {
    return "elementwise";
  }
  return "other";
}

}  // namespace

json summarize_trace(const json& trace, const TraceSummaryOptions& options) {
  SO_CHECK(trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array(),
           "the trace has no traceEvents array (not a Chrome trace written by Kineto)");
  std::vector<Event> events;
  for (const auto& raw : trace["traceEvents"]) {
    if (!raw.is_object() || raw.value("ph", "") != "X" || !raw.contains("ts") || !raw["ts"].is_number()) continue;
    Event e;
    e.kind = kind_of(raw.value("cat", ""));
    if (e.kind == Kind::other) continue;
    e.name = raw.value("name", "");
    e.start = raw["ts"].get<double>();
    e.end = e.start + (raw.contains("dur") && raw["dur"].is_number() ? raw["dur"].get<double>() : 0.0);
    e.thread = (raw.contains("pid") ? id_text(raw["pid"]) : "?") + "/" + (raw.contains("tid") ? id_text(raw["tid"]) : "?");
    if (raw.contains("args") && raw["args"].is_object()) {
      const auto& args = raw["args"];
      if (args.contains("correlation") && args["correlation"].is_number()) e.correlation = args["correlation"].get<int64_t>();
      if (args.contains("bytes") && args["bytes"].is_number()) e.bytes = args["bytes"].get<double>();
    }
    events.push_back(std::move(e));
  }
  const HostThreads host(events);

  // ---- The traced steps and the thread that runs them.
  struct Step {
    int64_t number;
    double start, end;
  };
  std::vector<Step> steps;
  std::string main_thread;
  for (const auto& e : events) {
    if (e.kind != Kind::annotation || !starts_with(e.name, kTraceStepPrefix)) continue;
    steps.push_back({std::stoll(e.name.substr(std::string_view(kTraceStepPrefix).size())), e.start, e.end});
    main_thread = e.thread;
  }
  SO_CHECK(!steps.empty(), "the trace holds no \"" << kTraceStepPrefix << "N\" annotation: no traced step to summarise");
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.start < b.start; });
  auto step_of = [&](double t) -> long {
    for (size_t s = 0; s < steps.size(); ++s) {
      if (t >= steps[s].start && t <= steps[s].end) return static_cast<long>(s);
    }
    return -1;
  };
  const bool gpu = std::any_of(events.begin(), events.end(), [](const Event& e) { return on_device(e.kind); });

  // ---- The device timeline: GPU activity, or the step thread's outermost operators.
  std::vector<Interval> activity;
  for (const auto& e : events) {
    if (gpu ? on_device(e.kind)
            : (e.kind == Kind::cpu_op && e.thread == main_thread &&
               (e.parent < 0 || events[static_cast<size_t>(e.parent)].kind != Kind::cpu_op))) {
      activity.push_back({e.start, e.end});
    }
  }
  const auto busy = merged(std::move(activity));

  // Device events by start, and runtime calls by correlation (who launched what).
  std::vector<long> device_by_start;
  std::unordered_map<int64_t, long> runtime_by_correlation, device_by_correlation;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (on_device(e.kind)) {
      device_by_start.push_back(static_cast<long>(i));
      if (e.correlation >= 0) device_by_correlation[e.correlation] = static_cast<long>(i);
    } else if (e.kind == Kind::runtime && e.correlation >= 0) {
      runtime_by_correlation[e.correlation] = static_cast<long>(i);
    }
  }
  std::sort(device_by_start.begin(), device_by_start.end(),
            [&](long a, long b) { return events[static_cast<size_t>(a)].start < events[static_cast<size_t>(b)].start; });

  auto name_of = [&](long i) { return i < 0 ? std::string() : events[static_cast<size_t>(i)].name; };
  // The runtime call that launched device work, and the innermost operator around it (-1: none).
  auto launch_of = [&](const Event& work) -> const Event* {
    const auto launch = runtime_by_correlation.find(work.correlation);
    return launch == runtime_by_correlation.end() ? nullptr : &events[static_cast<size_t>(launch->second)];
  };
  auto operator_around = [&](const Event& call) {
    return host.around(call.thread, call.start, [](const Event& e) { return e.kind == Kind::cpu_op; });
  };
  // The innermost superoffload annotation around time t on `thread`, else on the step's thread
  // (autograd runs a GPU's backward on a thread of its own).
  auto scope_at = [&](const std::string& thread, double t) {
    long s = host.around(thread, t, is_scope);
    if (s < 0 && thread != main_thread) s = host.around(main_thread, t, is_scope);
    return s;
  };

  // ---- Busy fraction and gaps, step by step.
  const double threshold_us = options.gap_threshold_ms * 1000.0;
  json step_rows = json::array();
  json gaps = json::array();
  double total_s = 0, busy_total_s = 0, gap_total_s = 0;
  size_t gap_count = 0;
  std::vector<size_t> step_gap_count(steps.size(), 0);
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto& step = steps[s];
    double busy_us = 0, gap_us = 0, cursor = step.start;
    auto idle = [&](double from, double to) {
      if (to - from < threshold_us) return;
      ++gap_count;
      ++step_gap_count[s];
      gap_us += to - from;
      // The host operation that preceded the gap (the innermost one running as the device ran
      // dry, else the last one that had ended), and what the host was in halfway through it.
      const auto is_operator = [](const Event& e) { return e.kind == Kind::cpu_op; };
      long before = host.around(main_thread, from, is_operator);
      std::string preceded_by = name_of(before);
      if (before < 0) {
        before = host.last_operator_before(main_thread, from);
        preceded_by = before < 0 ? "(none)" : "after " + name_of(before);
      }
      const double middle = (from + to) / 2;
      long scope = scope_at(main_thread, middle);
      if (scope < 0) scope = scope_at(main_thread, from);
      json gap = {{"step", step.number},
                  {"at_ms", (from - step.start) / 1000.0},
                  {"ms", (to - from) / 1000.0},
                  {"preceded_by", preceded_by},
                  {"host_during", name_of(host.around(main_thread, middle, is_operator))},
                  {"scope", name_of(scope)}};
      if (gpu) {
        // The host call that queued the work ending the gap.
        const auto next = std::lower_bound(device_by_start.begin(), device_by_start.end(), to - kNestingSlackUs,
                                           [&](long i, double t) { return events[static_cast<size_t>(i)].start < t; });
        if (next != device_by_start.end() && events[static_cast<size_t>(*next)].start <= to + kNestingSlackUs) {
          const auto& work = events[static_cast<size_t>(*next)];
          if (const Event* call = launch_of(work)) {
            const long by = operator_around(*call);
            gap["next"] = shortened(work.name, 80);
            gap["queued_by"] = by < 0 ? call->name : name_of(by);
          }
        }
      }
      gaps.push_back(std::move(gap));
    };
    for (const auto& b : busy) {
      if (b.end <= step.start) continue;
      if (b.start >= step.end) break;
      const double from = std::max(b.start, step.start), to = std::min(b.end, step.end);
      if (from > cursor) idle(cursor, from);
      busy_us += to - from;
      cursor = std::max(cursor, to);
    }
    if (step.end > cursor) idle(cursor, step.end);
    const double seconds = (step.end - step.start) / 1e6;
    total_s += seconds;
    busy_total_s += busy_us / 1e6;
    gap_total_s += gap_us / 1e6;
    step_rows.push_back({{"step", step.number},
                         {"seconds", seconds},
                         {"busy_seconds", busy_us / 1e6},
                         {"busy_fraction", seconds > 0 ? busy_us / 1e6 / seconds : 0.0},
                         {"gaps", step_gap_count[s]},
                         {"gap_seconds", gap_us / 1e6},
                         {"syncs", 0}});
  }
  std::stable_sort(gaps.begin(), gaps.end(), [](const json& a, const json& b) { return a["ms"].get<double>() > b["ms"].get<double>(); });
  if (gaps.size() > options.listed_gaps) gaps.erase(gaps.begin() + static_cast<std::ptrdiff_t>(options.listed_gaps), gaps.end());

  // ---- Top kernels (GPU) or operators by self time (CPU), inside the steps.
  struct Tally {
    double us = 0;
    int64_t calls = 0;
    std::map<std::string, double> launched_by_us;  // GPU: by the operator that launched it
  };
  // What launched a kernel: the outermost operator around its launch (the one our code or
  // autograd called: aten::linear, "autograd::engine::evaluate_function: MulBackward0"), with
  // the superoffload scope it ran in. A kernel's name alone does not say which of a layer's
  // elementwise chains it belongs to.
  auto launched_by = [&](const Event& work) -> std::string {
    const Event* launch = launch_of(work);
    if (!launch) return {};
    const auto& call = *launch;
    long op = operator_around(call);
    while (op >= 0) {
      const long parent = events[static_cast<size_t>(op)].parent;
      if (parent < 0 || events[static_cast<size_t>(parent)].kind != Kind::cpu_op) break;
      op = parent;
    }
    const long scope = scope_at(call.thread, call.start);
    return (op < 0 ? call.name : name_of(op)) + (scope < 0 ? "" : " in " + without_index(name_of(scope)));
  };
  std::map<std::string, Tally> kernels;
  if (gpu) {
    for (const auto& e : events) {
      if (e.kind == Kind::kernel && step_of(e.start) >= 0) {
        auto& tally = kernels[e.name];
        tally.us += e.end - e.start;
        ++tally.calls;
        if (auto by = launched_by(e); !by.empty()) tally.launched_by_us[by] += e.end - e.start;
      }
    }
  } else {
    std::vector<double> self(events.size(), 0.0);
    for (size_t i = 0; i < events.size(); ++i) {
      const auto& e = events[i];
      if (e.kind != Kind::cpu_op || e.thread != main_thread) continue;
      self[i] += e.end - e.start;
      if (e.parent >= 0 && events[static_cast<size_t>(e.parent)].kind == Kind::cpu_op) {
        self[static_cast<size_t>(e.parent)] -= e.end - e.start;
      }
    }
    for (size_t i = 0; i < events.size(); ++i) {
      const auto& e = events[i];
      if (e.kind != Kind::cpu_op || e.thread != main_thread || step_of(e.start) < 0) continue;
      kernels[e.name].us += std::max(0.0, self[i]);
      ++kernels[e.name].calls;
    }
  }
  double kernel_us = 0;
  std::vector<std::pair<std::string, Tally>> ranked(kernels.begin(), kernels.end());
  for (const auto& [name, t] : ranked) kernel_us += t.us;
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
  json top = json::array();
  for (size_t k = 0; k < std::min(options.top_kernels, ranked.size()); ++k) {
    const auto& [name, t] = ranked[k];
    json row = {{"name", shortened(name)},
                {"seconds", t.us / 1e6},
                {"calls", t.calls},
                {"share", kernel_us > 0 ? t.us / kernel_us : 0.0},
                {"step_share", total_s > 0 ? t.us / 1e6 / total_s : 0.0}};
    if (gpu) {
      // The three largest sources, each as its share of this kernel's time.
      std::vector<std::pair<std::string, double>> by(t.launched_by_us.begin(), t.launched_by_us.end());
      std::stable_sort(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
      json sources = json::array();
      for (size_t i = 0; i < std::min<size_t>(3, by.size()); ++i) {
        sources.push_back({{"by", shortened(by[i].first, 120)}, {"share", t.us > 0 ? by[i].second / t.us : 0.0}});
      }
      row["launched_by"] = std::move(sources);
    }
    top.push_back(std::move(row));
  }

  std::map<std::string, double> class_us;
  for (const auto& [name, t] : ranked) class_us[kernel_class(name, gpu)] += t.us;
  std::vector<std::pair<std::string, double>> classes(class_us.begin(), class_us.end());
  std::stable_sort(classes.begin(), classes.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  json class_rows = json::array();
  for (const auto& [name, us] : classes) {
    class_rows.push_back({{"class", name}, {"seconds", us / 1e6}, {"share", kernel_us > 0 ? us / kernel_us : 0.0}});
  }

  // ---- Host<->device copies.
  struct CopyTally {
    int64_t count = 0;
    double bytes = 0, us = 0;
  };
  std::map<std::pair<std::string, std::string>, CopyTally> copies;
  for (const auto& e : events) {
    if (e.kind != Kind::memcpy || step_of(e.start) < 0) continue;
    auto& c = copies[copy_kind(e.name)];
    ++c.count;
    c.bytes += e.bytes;
    c.us += e.end - e.start;
  }
  json copy_rows = json::array();
  for (const auto& [key, c] : copies) {
    copy_rows.push_back({{"direction", key.first},
                         {"memory", key.second},
                         {"count", c.count},
                         {"bytes", c.bytes},
                         {"seconds", c.us / 1e6},
                         {"gb_per_s", c.us > 0 ? c.bytes / (c.us / 1e6) / 1e9 : 0.0}});
  }

  // ---- Synchronising calls: one per call of our code, named by where it comes from.
  std::map<std::string, int64_t> sources;
  std::set<long> counted;  // the calls of our code already counted
  int64_t sync_count = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    bool synchronising = false;
    if (gpu) {
      if (e.kind == Kind::runtime) {
        synchronising = synchronising_runtime_call(e.name);
        if (!synchronising && e.name.rfind("cudaMemcpy", 0) == 0 && e.name.find("Async") != std::string::npos) {
          const auto copy = device_by_correlation.find(e.correlation);
          synchronising = copy != device_by_correlation.end() &&
                          events[static_cast<size_t>(copy->second)].name.find("Pageable") != std::string::npos;
        }
      }
    } else if (e.kind == Kind::cpu_op && host_reading_operator(e.name)) {
      // A read inside another operator's CPU kernel (the fused AdamW reads its step count) is
      // that kernel's business, and no read on a GPU: only reads our code asked for count.
      synchronising = true;
      for (long p = e.parent; p >= 0 && events[static_cast<size_t>(p)].kind == Kind::cpu_op;
           p = events[static_cast<size_t>(p)].parent) {
        synchronising = synchronising && host_reading_wrapper(events[static_cast<size_t>(p)].name);
      }
    }
    if (!synchronising) continue;
    const long s = step_of(e.start);
    if (s < 0) continue;
    // The operator our code called: the outermost one below our innermost annotation.
    long caller = -1;
    long scope = -1;
    for (long p = e.kind == Kind::cpu_op ? static_cast<long>(i) : e.parent; p >= 0; p = events[static_cast<size_t>(p)].parent) {
      const auto& a = events[static_cast<size_t>(p)];
      if (a.kind == Kind::annotation) {
        if (is_scope(a)) {
          scope = p;
          break;
        }
        continue;
      }
      if (a.kind == Kind::cpu_op) caller = p;
    }
    if (scope < 0) scope = scope_at(e.thread, e.start);
    const long key = caller >= 0 ? caller : static_cast<long>(i);
    if (!counted.insert(key).second) continue;
    ++sync_count;
    step_rows[static_cast<size_t>(s)]["syncs"] = step_rows[static_cast<size_t>(s)]["syncs"].get<int64_t>() + 1;
    const std::string where = (scope >= 0 ? without_index(name_of(scope)) : std::string("(outside superoffload's scopes)")) +
                              " > " + (caller >= 0 ? name_of(caller) : e.name);
    ++sources[where];
  }
  std::vector<std::pair<std::string, int64_t>> ranked_sources(sources.begin(), sources.end());
  std::stable_sort(ranked_sources.begin(), ranked_sources.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  json source_rows = json::array();
  for (size_t k = 0; k < std::min(options.listed_sync_sources, ranked_sources.size()); ++k) {
    source_rows.push_back({{"where", ranked_sources[k].first}, {"count", ranked_sources[k].second}});
  }

  const double steps_n = static_cast<double>(steps.size());
  json summary = {
      {"device", gpu ? "gpu" : "cpu"},
      {"timeline", gpu ? "GPU kernels, copies and sets on every stream"
                       : "operators of the thread that runs the step (a CPU run)"},
      {"steps", step_rows},
      {"seconds", total_s},
      {"busy_seconds", busy_total_s},
      {"busy_fraction", total_s > 0 ? busy_total_s / total_s : 0.0},
      {"kernels",
       {{"basis", gpu ? "GPU kernels, total time" : "CPU operators, self time"},
        {"seconds", kernel_us / 1e6},
        {"distinct", kernels.size()},
        {"top", top},
        {"classes", class_rows}}},
      {"gaps",
       {{"threshold_ms", options.gap_threshold_ms},
        {"count", gap_count},
        {"seconds", gap_total_s},
        {"listed", gaps}}},
      {"copies", copy_rows},
      {"syncs",
       {{"basis", gpu ? "CUDA synchronise calls, blocking and pageable copies"
                      : "host reads of tensor values (each synchronises on a GPU)"},
        {"count", sync_count},
        {"per_step", sync_count / steps_n},
        {"sources", source_rows}}},
  };
  return summary;
}

namespace {

std::string bytes_text(double bytes) {
  char buffer[32];
  if (bytes >= 1e9) {
    std::snprintf(buffer, sizeof buffer, "%.2f GB", bytes / 1e9);
  } else if (bytes >= 1e6) {
    std::snprintf(buffer, sizeof buffer, "%.2f MB", bytes / 1e6);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.0f kB", bytes / 1e3);
  }
  return buffer;
}

double number(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

std::vector<std::pair<std::string, double>> trace_figures(const json& s) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const bool valid = s.is_object() && s.contains("steps");
  const bool gpu = valid && s.value("device", "") == "gpu";
  auto copies = [&](const char* direction, const char* what) {
    if (!gpu) return nan;
    double bytes = 0, seconds = 0;
    for (const auto& c : s["copies"]) {
      if (c.value("direction", "") != direction) continue;
      bytes += number(c, "bytes");
      seconds += number(c, "seconds");
    }
    return std::string(what) == "bytes" ? bytes : (seconds > 0 ? bytes / seconds / 1e9 : nan);
  };
  double pageable = gpu ? 0.0 : nan;
  if (gpu) {
    for (const auto& c : s["copies"]) {
      if (c.value("memory", "") == "pageable") pageable += number(c, "bytes");
    }
  }
  auto allocator = [&](const char* key) {
    return valid && s.contains("allocator") && s["allocator"].is_object() ? number(s["allocator"], key) : nan;
  };
  const double steps = valid ? static_cast<double>(s["steps"].size()) : nan;
  return {{"steps", steps},
          {"seconds", valid ? number(s, "seconds") : nan},
          {"busy_fraction", valid ? number(s, "busy_fraction") : nan},
          {"gaps", valid ? number(s["gaps"], "count") : nan},
          {"gap_seconds", valid ? number(s["gaps"], "seconds") : nan},
          {"syncs_per_step", valid ? number(s["syncs"], "per_step") : nan},
          {"htod_bytes", copies("HtoD", "bytes")},
          {"htod_gb_per_s", copies("HtoD", "rate")},
          {"dtoh_bytes", copies("DtoH", "bytes")},
          {"dtoh_gb_per_s", copies("DtoH", "rate")},
          {"pageable_bytes", pageable},
          {"allocator_retries", allocator("retries")},
          {"device_allocs", allocator("device_allocs")},
          {"device_frees", allocator("device_frees")}};
}

std::string format_trace_rank_line(size_t rank, const json& summary) {
  std::map<std::string, double> f;
  for (const auto& [name, value] : trace_figures(summary)) f[name] = value;
  char line[192];
  std::snprintf(line, sizeof line, "  rank %-4zu busy %.1f%%, %.0f gaps (%.1f ms), %.1f synchronising calls per step\n",
                rank, 100 * f["busy_fraction"], f["gaps"], 1000 * f["gap_seconds"], f["syncs_per_step"]);
  return line;
}

std::string format_trace_summary(const json& s, size_t kernels, size_t gaps, size_t sync_sources) {
  std::string out;
  char line[768];
  const bool gpu = s.value("device", "") == "gpu";
  const char* busy_word = gpu ? "device busy" : "operators busy";
  for (const auto& step : s["steps"]) {
    std::snprintf(line, sizeof line, "  step %lld: %.1f ms, %s %.1f%%, %lld gap(s) over %.1f ms (%.1f ms), %lld synchronising call(s)\n",
                  static_cast<long long>(step["step"].get<int64_t>()), 1000 * number(step, "seconds"), busy_word,
                  100 * number(step, "busy_fraction"), static_cast<long long>(step["gaps"].get<int64_t>()),
                  number(s["gaps"], "threshold_ms"), 1000 * number(step, "gap_seconds"),
                  static_cast<long long>(step["syncs"].get<int64_t>()));
    out += line;
  }
  const auto& k = s["kernels"];
  std::snprintf(line, sizeof line, "  top %s (share of %.1f ms in %lld distinct):\n", k.value("basis", "").c_str(),
                1000 * number(k, "seconds"), static_cast<long long>(k.value("distinct", 0)));
  out += line;
  size_t shown = 0;
  for (const auto& row : k["top"]) {
    if (shown++ == kernels) break;
    std::snprintf(line, sizeof line, "    %5.1f%%  %9.2f ms  %7lld calls  %s\n", 100 * number(row, "share"),
                  1000 * number(row, "seconds"), static_cast<long long>(row["calls"].get<int64_t>()),
                  row["name"].get<std::string>().c_str());
    out += line;
    if (row.contains("launched_by") && !row["launched_by"].empty()) {
      out += "              from";
      bool first = true;
      for (const auto& source : row["launched_by"]) {
        std::snprintf(line, sizeof line, "%s %s %.0f%%", first ? "" : ",", source["by"].get<std::string>().c_str(),
                      100 * number(source, "share"));
        out += line;
        first = false;
      }
      out += "\n";
    }
  }
  if (k.contains("classes") && !k["classes"].empty()) {
    out += "  by class:";
    bool first = true;
    for (const auto& row : k["classes"]) {
      std::snprintf(line, sizeof line, "%s %s %.1f%%", first ? "" : ",", row["class"].get<std::string>().c_str(),
                    100 * number(row, "share"));
      out += line;
      first = false;
    }
    out += "\n";
  }
  const auto& g = s["gaps"];
  std::snprintf(line, sizeof line, "  %s idle gaps over %.1f ms: %lld, %.1f ms in all%s\n", gpu ? "device" : "operator",
                number(g, "threshold_ms"), static_cast<long long>(g["count"].get<int64_t>()), 1000 * number(g, "seconds"),
                g["listed"].empty() ? "" : "; the longest:");
  out += line;
  shown = 0;
  for (const auto& gap : g["listed"]) {
    if (shown++ == gaps) break;
    const std::string scope = gap.value("scope", ""), during = gap.value("host_during", "");
    std::string where = scope.empty() ? "outside superoffload's scopes" : "in " + scope;
    if (!during.empty()) where += ", host in " + during;
    std::snprintf(line, sizeof line, "    %8.2f ms at +%.1f ms of step %lld, %s; preceded by %s\n", number(gap, "ms"),
                  number(gap, "at_ms"), static_cast<long long>(gap["step"].get<int64_t>()), where.c_str(),
                  gap.value("preceded_by", "").c_str());
    out += line;
    if (gap.contains("queued_by")) {
      out += "               ended by " + gap.value("next", "") + ", queued by " + gap.value("queued_by", "") + "\n";
    }
  }
  if (s["copies"].empty()) {
    out += gpu ? "  host<->device copies: none\n" : "  host<->device copies: none (a CPU run)\n";
  } else {
    out += "  copies:\n";
    for (const auto& c : s["copies"]) {
      std::snprintf(line, sizeof line, "    %-5s %-9s %6lld copies  %10s  %8.2f GB/s\n", c["direction"].get<std::string>().c_str(),
                    c["memory"].get<std::string>().c_str(), static_cast<long long>(c["count"].get<int64_t>()),
                    bytes_text(number(c, "bytes")).c_str(), number(c, "gb_per_s"));
      out += line;
    }
  }
  const auto& y = s["syncs"];
  std::snprintf(line, sizeof line, "  synchronising calls (%s): %.1f per step%s\n", y.value("basis", "").c_str(),
                number(y, "per_step"), y["sources"].empty() ? "" : ", from:");
  out += line;
  shown = 0;
  for (const auto& src : y["sources"]) {
    if (shown++ == sync_sources) break;
    std::snprintf(line, sizeof line, "    %6lld  %s\n", static_cast<long long>(src["count"].get<int64_t>()),
                  src["where"].get<std::string>().c_str());
    out += line;
  }
  if (s.contains("allocator") && s["allocator"].is_object()) {
    const auto& a = s["allocator"];
    std::snprintf(line, sizeof line, "  caching allocator: %lld retries, %lld cudaMalloc, %lld cudaFree over the traced steps\n",
                  static_cast<long long>(a.value("retries", int64_t{0})), static_cast<long long>(a.value("device_allocs", int64_t{0})),
                  static_cast<long long>(a.value("device_frees", int64_t{0})));
    out += line;
  } else {
    out += "  caching allocator: none (a CPU run)\n";
  }
  return out;
}

}  // namespace superoffload::train
