// Linux resctrl (/sys/fs/resctrl): what a node offers for keeping the CPU optimizer's cache and
// memory bandwidth apart from the rest of the rank (Intel RDT, AMD PQoS, Arm MPAM all appear
// through it), read from the mount table and the tree's info/ directory and root schemata.
//
// Reading never throws and never writes: a file that is missing or malformed is listed in
// `problems` and its resource left out, so that a node with a broken or partial tree trains
// unpartitioned. The layout follows the kernel's Documentation/filesystems/resctrl.rst.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace superoffload::resctrl {

// A cache resource (L3, L2, or their CDP halves L3CODE/L3DATA): capacity bit masks.
struct CacheResource {
  std::string name;
  int mask_bits = 0;          // width of info/<name>/cbm_mask (all of it = the whole cache)
  int min_bits = 1;           // info/<name>/min_cbm_bits: the fewest set bits a mask may have (AMD: 0)
  int control_groups = 0;     // info/<name>/num_closids
  bool sparse_masks = false;  // info/<name>/sparse_masks: non-contiguous masks allowed (absent: no)
  unsigned long long shareable_mask = 0;  // info/<name>/shareable_bits: ways other agents may use too
  std::vector<int> domains;   // cache ids from the root schemata ("L3:0=7fff;1=7fff")
};

// A memory-bandwidth resource (MB; AMD's SMBA for slow memory).
struct BandwidthResource {
  std::string name;
  int min = 0;                // info/<name>/min_bandwidth
  int granularity = 1;        // info/<name>/bandwidth_gran
  int max = 100;              // the root group's value: 100 (percent) or the hardware's unit count
  bool linear = true;         // info/<name>/delay_linear
  int control_groups = 0;     // info/<name>/num_closids
  std::vector<int> domains;
};

// info/L3_MON: cache occupancy and bandwidth counters per monitoring group.
struct Monitoring {
  int counters = 0;                   // info/L3_MON/num_rmids
  std::vector<std::string> features;  // info/L3_MON/mon_features: llc_occupancy, mbm_total_bytes, ...
  bool has(const std::string& feature) const;
};

struct Resctrl {
  std::string mount;  // empty: not mounted
  bool writable = false;  // control groups can be made here (the root directory is writable)
  std::vector<CacheResource> caches;
  std::vector<BandwidthResource> bandwidth;
  std::optional<Monitoring> monitoring;
  std::vector<std::string> problems;  // "info/L3/cbm_mask: not a hex mask ('zz')", ...

  bool mounted() const { return !mount.empty(); }
  // Control groups the kernel allows: the fewest of all resources (it uses that limit too).
  int control_groups() const;
};

// The resctrl mount point in a mount table (/proc/self/mounts format), if any.
std::optional<std::string> find_mount(const std::string& mount_table = "/proc/self/mounts");
// The tree at `root`: resources, limits, monitoring, problems.
Resctrl read_tree(const std::string& root);
// find_mount + read_tree.
Resctrl detect(const std::string& mount_table = "/proc/self/mounts");
// One line for `version`, `plan` and the start-up log:
//   "resctrl at /sys/fs/resctrl (writable): L3 15-bit masks, at least 1 bit, contiguous, domains 0,1;
//    MB 10-100 in steps of 10, domains 0,1; 15 control groups; monitoring llc_occupancy,
//    mbm_total_bytes (256 counters)"
// or why there is nothing: "resctrl: not mounted (...)".
std::string describe(const Resctrl& resctrl);

}  // namespace superoffload::resctrl
