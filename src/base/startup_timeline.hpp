// Where a job's start-up goes, from the process's start (as the kernel counts it: the loading
// of LibTorch and MPI's start included) to the end of its first training step: a sequence of
// phases, each with its wall time and the growth of the process's peak resident memory, and
// for a phase that reads a known amount (the weights) its bytes. Phases are marked where they
// end; a phase that runs interleaved with another (the weights read layer by layer inside the
// engine's partitioning) is carved out of it from its own measured cost. One timeline per
// process; the trainer reports it after step 1 (log, metrics.h5 /startup, `inspect`).
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "base/timer.hpp"

namespace superoffload::base {

// Peak resident memory of this process so far (getrusage), in bytes.
double peak_rss_bytes();

// What one stretch of work cost: wall seconds and peak-RSS growth.
struct PhaseCost {
  double seconds = 0;
  double rss_growth_bytes = 0;
};

// Measures `work` and adds its cost to `into`.
template <class Work>
void add_cost(PhaseCost& into, Work&& work);

struct StartupPhase {
  std::string name;
  PhaseCost cost;
  double bytes = std::numeric_limits<double>::quiet_NaN();  // read by the phase, where known
};

class StartupTimeline {
 public:
  static StartupTimeline& instance();

  // Ends the phase `name` now; it began at the previous mark (the first at the process's
  // start). `parts`, measured inside it, become phases of their own listed before it, and
  // its own cost is what they leave.
  void mark(const std::string& name, const std::vector<StartupPhase>& parts = {});
  const std::vector<StartupPhase>& phases() const { return phases_; }
  // Seconds from the process's start to the last mark.
  double total_seconds() const;

 private:
  StartupTimeline();
  double start_s_;     // the process's start on base::now_s()'s clock
  double last_s_;
  double last_rss_ = 0;
  std::vector<StartupPhase> phases_;
};

// The table rank 0 logs and `inspect` prints.
std::string format_startup(const std::vector<StartupPhase>& phases, const std::vector<double>& slowest_rank_seconds);

template <class Work>
void add_cost(PhaseCost& into, Work&& work) {
  const double start = now_s(), rss = peak_rss_bytes();
  work();
  into.seconds += now_s() - start;
  into.rss_growth_bytes += peak_rss_bytes() - rss;
}

}  // namespace superoffload::base
