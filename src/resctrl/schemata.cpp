// Splitting caches and capping bandwidth between a rank's two resctrl groups.
#include "resctrl/schemata.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace superoffload::resctrl {
namespace {

std::string hex(unsigned long long value) {
  std::ostringstream out;
  out << std::hex << value;
  return out.str();
}

// The resource's domains that the rank uses, or all of them when it uses none we know of.
std::vector<int> rank_domains(const std::vector<int>& domains, const std::vector<int>& cache_ids) {
  std::vector<int> mine;
  for (int d : domains) {
    if (std::find(cache_ids.begin(), cache_ids.end(), d) != cache_ids.end()) mine.push_back(d);
  }
  return mine.empty() ? domains : mine;
}

std::string line(const std::string& name, const std::vector<int>& domains, const std::string& value) {
  std::string out = name + ":";
  for (size_t i = 0; i < domains.size(); ++i) out += (i ? ";" : "") + std::to_string(domains[i]) + "=" + value;
  return out + "\n";
}

std::string comma_list(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ",") + std::to_string(v);
  return out;
}

}  // namespace

std::string check_mask(const CacheResource& cache, unsigned long long mask) {
  const unsigned long long full = cache.mask_bits >= 64 ? ~0ULL : (1ULL << cache.mask_bits) - 1;
  if ((mask & ~full) != 0) return "mask " + hex(mask) + " is wider than info/" + cache.name + "/cbm_mask (" + hex(full) + ")";
  const int bits = __builtin_popcountll(mask);
  if (bits < cache.min_bits) {
    return "mask " + hex(mask) + " has " + std::to_string(bits) + " bit(s), fewer than info/" + cache.name +
           "/min_cbm_bits (" + std::to_string(cache.min_bits) + ")";
  }
  if (!cache.sparse_masks && mask != 0) {
    const unsigned long long shifted = mask >> __builtin_ctzll(mask);
    if ((shifted & (shifted + 1)) != 0) {
      return "mask " + hex(mask) + " is not contiguous, and info/" + cache.name + "/sparse_masks does not allow that";
    }
  }
  return {};
}

GroupSchemata plan_schemata(const Resctrl& resctrl, const std::vector<int>& cache_ids, const Split& split) {
  GroupSchemata out;
  std::ostringstream summary;
  if (!(split.optimizer_cache > 0 && split.optimizer_cache < 1) ||
      !(split.optimizer_bandwidth > 0 && split.optimizer_bandwidth <= 1)) {
    out.error = "the optimizer's cache share must lie in (0, 1) and its bandwidth share in (0, 1]";
    return out;
  }
  for (const auto& cache : resctrl.caches) {
    if (cache.domains.empty()) continue;  // not in the root schemata: nothing to write
    // Each side keeps at least one way (and min_cbm_bits): an empty mask would leave a group no
    // cache at all, which the kernel refuses on Intel and allows on AMD, where it is never wanted.
    const int least = std::max(1, cache.min_bits);
    if (cache.mask_bits < 2 * least) {
      out.error = cache.name + " has " + std::to_string(cache.mask_bits) + " ways and masks of at least " +
                  std::to_string(least) + ": too few to split between two groups";
      return out;
    }
    const int optimizer_ways =
        std::clamp(static_cast<int>(std::lround(split.optimizer_cache * cache.mask_bits)), least, cache.mask_bits - least);
    const unsigned long long optimizer_mask = (1ULL << optimizer_ways) - 1;
    const unsigned long long full = cache.mask_bits >= 64 ? ~0ULL : (1ULL << cache.mask_bits) - 1;
    const unsigned long long rest_mask = full & ~optimizer_mask;
    for (const auto mask : {optimizer_mask, rest_mask}) {
      if (auto problem = check_mask(cache, mask); !problem.empty()) {
        out.error = problem;
        return out;
      }
    }
    const auto domains = rank_domains(cache.domains, cache_ids);
    out.optimizer += line(cache.name, domains, hex(optimizer_mask));
    out.rest += line(cache.name, domains, hex(rest_mask));
    summary << (summary.tellp() > 0 ? "; " : "") << cache.name << " " << optimizer_ways << " of " << cache.mask_bits
            << " ways to the optimizer (" << hex(optimizer_mask) << "), " << cache.mask_bits - optimizer_ways
            << " to the rest (" << hex(rest_mask) << ") on domain(s) " << comma_list(domains);
  }
  for (const auto& bandwidth : resctrl.bandwidth) {
    if (bandwidth.domains.empty()) continue;
    // Rounded to the granularity, never below the minimum the hardware takes.
    const int steps = static_cast<int>(std::lround(split.optimizer_bandwidth * bandwidth.max / bandwidth.granularity));
    const int optimizer = std::min(steps * bandwidth.granularity, bandwidth.max);
    if (optimizer < std::max(bandwidth.min, 1)) {
      std::ostringstream share;
      share << split.optimizer_bandwidth;
      out.error = "an optimizer bandwidth share of " + share.str() + " is " + std::to_string(optimizer) + " of " +
                  bandwidth.name + "'s " + std::to_string(bandwidth.max) + ", below its minimum (info/" +
                  bandwidth.name + "/min_bandwidth " + std::to_string(bandwidth.min) + ")";
      return out;
    }
    // Only a cap is written: a new group starts at the whole bandwidth, and the rest's is never
    // capped (nor, on an administrator's groups, touched).
    if (optimizer < bandwidth.max) out.optimizer += line(bandwidth.name, rank_domains(bandwidth.domains, cache_ids),
                                                         std::to_string(optimizer));
    summary << (summary.tellp() > 0 ? "; " : "") << bandwidth.name << " "
            << (optimizer < bandwidth.max ? std::to_string(optimizer) + " of " + std::to_string(bandwidth.max) +
                                                " for the optimizer"
                                          : std::string("uncapped"));
  }
  if (out.optimizer.empty()) {
    out.error = "nothing to partition: no cache resource with domains in the root schemata, and the optimizer's "
                "bandwidth uncapped";
    return out;
  }
  out.summary = summary.str();
  return out;
}

std::vector<int> cache_ids_of_cpus(const std::vector<int>& cpus, const std::string& sysfs) {
  namespace fs = std::filesystem;
  std::set<int> ids;
  for (int cpu : cpus) {
    const fs::path cache = fs::path(sysfs) / ("cpu" + std::to_string(cpu)) / "cache";
    std::error_code error;
    for (fs::directory_iterator it(cache, error), end; !error && it != end; it.increment(error)) {
      if (it->path().filename().string().rfind("index", 0) != 0) continue;
      int level = 0, id = -1;
      std::ifstream(it->path() / "level") >> level;
      if (level != 3) continue;
      if (std::ifstream(it->path() / "id") >> id; id >= 0) ids.insert(id);
    }
  }
  return {ids.begin(), ids.end()};
}

}  // namespace superoffload::resctrl
