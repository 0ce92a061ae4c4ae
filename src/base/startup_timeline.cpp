// StartupTimeline.
#include "base/startup_timeline.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace superoffload::base {
namespace {

// How long ago the kernel started this process: /proc/self/stat's start time (clock ticks
// after boot) against /proc/uptime. 0 where /proc cannot tell.
double process_age_s() {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; fields >> field; ++i) {
    if (i == 22) {
      start_ticks = std::stoull(field);
      break;
    }
  }
  double uptime = 0;
  std::ifstream("/proc/uptime") >> uptime;
  const long ticks = sysconf(_SC_CLK_TCK);
  if (start_ticks == 0 || uptime <= 0 || ticks <= 0) return 0;
  const double age = uptime - static_cast<double>(start_ticks) / static_cast<double>(ticks);
  return age > 0 ? age : 0;
}

}  // namespace

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

StartupTimeline& StartupTimeline::instance() {
  static StartupTimeline timeline;
  return timeline;
}

StartupTimeline::StartupTimeline() : start_s_(now_s() - process_age_s()), last_s_(start_s_) {}

void StartupTimeline::mark(const std::string& name, const std::vector<StartupPhase>& parts) {
  const double now = now_s(), rss = peak_rss_bytes();
  StartupPhase phase{name, {now - last_s_, rss - last_rss_}};
  for (const auto& part : parts) {
    phases_.push_back(part);
    phase.cost.seconds -= part.cost.seconds;
    phase.cost.rss_growth_bytes -= part.cost.rss_growth_bytes;
  }
  phases_.push_back(phase);
  last_s_ = now;
  last_rss_ = rss;
}

double StartupTimeline::total_seconds() const { return last_s_ - start_s_; }

std::string format_startup(const std::vector<StartupPhase>& phases, const std::vector<double>& slowest) {
  double total = 0, rss = 0;
  for (const auto& p : phases) {
    total += p.cost.seconds;
    rss += p.cost.rss_growth_bytes;
  }
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "start-up: %.2f s from the process's start to the end of step 1 (rank 0; slowest rank beside)\n",
                total);
  out += line;
  std::snprintf(line, sizeof line, "  %-34s %9s %6s %9s %12s  %s\n", "phase", "seconds", "share", "slowest", "peak RSS +",
                "read");
  out += line;
  for (size_t i = 0; i < phases.size(); ++i) {
    const auto& p = phases[i];
    std::string read;
    if (p.bytes == p.bytes && p.bytes > 0) {  // not NaN
      char buffer[64];
      std::snprintf(buffer, sizeof buffer, "%.2f GB at %.2f GB/s", p.bytes / 1e9,
                    p.cost.seconds > 0 ? p.bytes / p.cost.seconds / 1e9 : 0.0);
      read = buffer;
    }
    std::snprintf(line, sizeof line, "  %-34s %9.3f %5.1f%% %9.3f %9.1f MiB  %s\n", p.name.c_str(), p.cost.seconds,
                  total > 0 ? 100 * p.cost.seconds / total : 0.0, i < slowest.size() ? slowest[i] : p.cost.seconds,
                  p.cost.rss_growth_bytes / (1 << 20), read.c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-34s %9.3f %6s %9s %9.1f MiB\n", "all", total, "", "", rss / (1 << 20));
  out += line;
  return out;
}

}  // namespace superoffload::base
