// A resctrl group's counters: memory traffic (mbm_total_bytes, or mbm_local_bytes where only
// that is counted) and last-level-cache occupancy (llc_occupancy), summed over the group's
// monitoring domains (<group>/mon_data/mon_L3_NN/), and the bandwidth between two readings.
#pragma once

#include <string>

namespace superoffload::resctrl {

struct Counters {
  double bytes = 0;      // memory traffic since the group was made; NaN: not counted here
  double occupancy = 0;  // bytes of the cache the group holds now; NaN: not counted here
};

// NaN where the group has no such counter, or a domain reads "Unavailable" or "Error".
Counters read_counters(const std::string& group_dir);

// GB/s of a group between successive samples.
class BandwidthMeter {
 public:
  BandwidthMeter() = default;
  explicit BandwidthMeter(std::string group_dir, double now_s);
  struct Sample {
    double gb_per_s;         // since the last sample; NaN when not counted or on a counter reset
    double occupancy_bytes;  // now; NaN when not counted
  };
  Sample sample(double now_s);
  bool active() const { return !dir_.empty(); }

 private:
  std::string dir_;
  double last_bytes_ = 0, last_s_ = 0;
};

}  // namespace superoffload::resctrl
