// The schemata of a rank's two resctrl groups: the CPU optimizer's and the rest of the rank's.
//
// Caches are split, not shared: the optimizer gets the low ways of each cache and the rest the
// high ones, so that the optimizer's stream (every byte of the master weights and moments once
// per step, far more than any cache) cannot evict what the GPU feed and the communication
// threads reuse. The high ways are the ones x86 parts list as shareable with I/O (DDIO): they
// stay with the threads that feed the GPU. Memory bandwidth is a cap (MBA and MPAM's MB are
// maxima, not reservations): the optimizer's is configurable and written only when below the
// whole; the rest's is never written (a new group starts at the whole bandwidth).
// Every value is checked against info/ before anything is written.
#pragma once

#include <string>
#include <vector>

#include "resctrl/resctrl.hpp"

namespace superoffload::resctrl {

struct Split {
  double optimizer_cache = 0.25;     // share of each cache's ways for the optimizer (the rest: the others)
  double optimizer_bandwidth = 1.0;  // the optimizer's bandwidth cap, as a share of the domain's; 1: none
};

struct GroupSchemata {
  std::string optimizer, rest;  // the text written to each group's schemata file ("L3:0=f\nMB:0=50\n")
  std::string summary;          // "L3 4 of 15 ways to the optimizer (f), 11 to the rest (7ff0) on domain(s) 0; MB 50 of
                                // 100 for the optimizer"
  std::string error;            // not empty: no split is possible, and why
};

// The schemata for a rank whose CPUs share the caches `cache_ids` (ids of their last-level
// caches, cache_ids_of_cpus below); a resource none of whose domains is among them gets lines
// for all its domains (for example MB domains numbered by NUMA node). Empty cache_ids: all.
GroupSchemata plan_schemata(const Resctrl& resctrl, const std::vector<int>& cache_ids, const Split& split);

// Why `mask` is not a valid capacity bit mask of `cache` (empty: it is): wider than
// cbm_mask, fewer bits than min_cbm_bits, or not contiguous where sparse masks are not allowed.
std::string check_mask(const CacheResource& cache, unsigned long long mask);

// The ids of the level-3 caches of `cpus`, from <sysfs>/cpuN/cache/index*/{level,id}; CPUs
// whose cache id cannot be read are left out (an empty answer means "unknown").
std::vector<int> cache_ids_of_cpus(const std::vector<int>& cpus,
                                   const std::string& sysfs = "/sys/devices/system/cpu");

}  // namespace superoffload::resctrl
