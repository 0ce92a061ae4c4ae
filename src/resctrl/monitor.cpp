// Reading a resctrl group's monitoring counters.
#include "resctrl/monitor.hpp"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

namespace superoffload::resctrl {
namespace {

namespace fs = std::filesystem;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A counter's value; NaN when absent or not a count ("Unavailable", "Error").
double counter(const fs::path& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text)) return kNaN;
  unsigned long long value = 0;
  const auto [at, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && at == text.data() + text.size() ? static_cast<double>(value) : kNaN;
}

}  // namespace

Counters read_counters(const std::string& group_dir) {
  Counters sum{kNaN, kNaN};
  bool total_missing = false, occupancy_missing = false;
  std::error_code error;
  for (fs::directory_iterator it(fs::path(group_dir) / "mon_data", error), end; !error && it != end;
       it.increment(error)) {
    if (it->path().filename().string().rfind("mon_L3_", 0) != 0) continue;
    double bytes = counter(it->path() / "mbm_total_bytes");
    if (std::isnan(bytes) && !fs::exists(it->path() / "mbm_total_bytes")) bytes = counter(it->path() / "mbm_local_bytes");
    const double occupancy = counter(it->path() / "llc_occupancy");
    // One domain that cannot be read makes the sum unknown, not smaller.
    total_missing = total_missing || std::isnan(bytes);
    occupancy_missing = occupancy_missing || std::isnan(occupancy);
    sum.bytes = (std::isnan(sum.bytes) ? 0 : sum.bytes) + (std::isnan(bytes) ? 0 : bytes);
    sum.occupancy = (std::isnan(sum.occupancy) ? 0 : sum.occupancy) + (std::isnan(occupancy) ? 0 : occupancy);
  }
  if (total_missing) sum.bytes = kNaN;
  if (occupancy_missing) sum.occupancy = kNaN;
  return sum;
}

BandwidthMeter::BandwidthMeter(std::string group_dir, double now_s) : dir_(std::move(group_dir)), last_s_(now_s) {
  last_bytes_ = read_counters(dir_).bytes;
}

BandwidthMeter::Sample BandwidthMeter::sample(double now_s) {
  if (dir_.empty()) return {kNaN, kNaN};
  const auto now = read_counters(dir_);
  const double seconds = now_s - last_s_;
  // A counter that went backwards was reset (the group was remade): no figure this time.
  const double rate = std::isnan(now.bytes) || std::isnan(last_bytes_) || now.bytes < last_bytes_ || seconds <= 0
                          ? kNaN
                          : (now.bytes - last_bytes_) / seconds / 1e9;
  last_bytes_ = now.bytes;
  last_s_ = now_s;
  return {rate, now.occupancy};
}

}  // namespace superoffload::resctrl
