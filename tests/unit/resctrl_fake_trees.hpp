// Fake resctrl trees for the tests (this machine has no resctrl), laid out as three kinds of
// node expose them. Sources of the values:
//   - Intel Sapphire Rapids (RDT), 2 sockets: the x86 examples of the kernel's
//     Documentation/filesystems/resctrl.rst (one L3 and one MB domain per socket, MB from 10 to
//     100 percent in steps of 10, linear), with the 15 ways of SPR's L3 (cbm_mask 7fff); the
//     counts of control groups (15 for L3, 8 for MB) and RMIDs are illustrative.
//   - AMD EPYC Zen 4 (PQoS), one socket of 8 CCDs: the same document's AMD rules (one L3 domain
//     per CCX, masks may be empty (min_cbm_bits 0) and sparse, MB and SMBA in 1/8 GB/s units up
//     to 2048, not linear) with Zen 4's 16-way L3; counts illustrative.
//   - NVIDIA Grace (Arm MPAM), one socket: no public resctrl dump of a Grace was found; the
//     resources are those the arm64 MPAM driver offers (L3 cache portions, MB maximum bandwidth
//     in percent, cache-storage and bandwidth-usage monitors), their widths and counts made up.
// The kernel's side (what a real tree accepts) is not exercised here.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace superoffload::resctrl::testing {

namespace fs = std::filesystem;

class FakeTree {
 public:
  explicit FakeTree(const std::map<std::string, std::string>& files) {
    root_ = fs::temp_directory_path() / ("so_resctrl_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(root_);
    for (const auto& [path, content] : files) write(path, content);
  }
  ~FakeTree() { fs::remove_all(root_); }
  FakeTree(const FakeTree&) = delete;
  FakeTree& operator=(const FakeTree&) = delete;
  void write(const std::string& path, const std::string& content) const {
    fs::create_directories((root_ / path).parent_path());
    std::ofstream(root_ / path) << content;
  }
  void remove(const std::string& path) const { fs::remove(root_ / path); }
  std::string root() const { return root_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path root_;
};

inline std::map<std::string, std::string> sapphire_rapids() {
  return {{"info/L3/cbm_mask", "7fff\n"},
          {"info/L3/min_cbm_bits", "1\n"},
          {"info/L3/num_closids", "15\n"},
          {"info/L3/shareable_bits", "0\n"},
          {"info/L3/bit_usage", "0=SSSSSSSSSSSSSSS;1=SSSSSSSSSSSSSSS\n"},
          {"info/MB/bandwidth_gran", "10\n"},
          {"info/MB/delay_linear", "1\n"},
          {"info/MB/min_bandwidth", "10\n"},
          {"info/MB/num_closids", "8\n"},
          {"info/MB/thread_throttle_mode", "max\n"},
          {"info/L3_MON/num_rmids", "224\n"},
          {"info/L3_MON/mon_features", "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n"},
          {"info/L3_MON/max_threshold_occupancy", "270336\n"},
          {"info/last_cmd_status", "ok\n"},
          {"schemata", "    L3:0=7fff;1=7fff\n    MB:0=100;1=100\n"},
          {"tasks", "1\n"}};
}

inline std::map<std::string, std::string> amd_zen4() {
  return {{"info/L3/cbm_mask", "ffff\n"},
          {"info/L3/min_cbm_bits", "0\n"},
          {"info/L3/num_closids", "16\n"},
          {"info/L3/shareable_bits", "0\n"},
          {"info/L3/sparse_masks", "1\n"},
          {"info/MB/bandwidth_gran", "1\n"},
          {"info/MB/delay_linear", "0\n"},
          {"info/MB/min_bandwidth", "0\n"},
          {"info/MB/num_closids", "16\n"},
          {"info/SMBA/bandwidth_gran", "1\n"},
          {"info/SMBA/delay_linear", "0\n"},
          {"info/SMBA/min_bandwidth", "0\n"},
          {"info/SMBA/num_closids", "16\n"},
          {"info/L3_MON/num_rmids", "256\n"},
          {"info/L3_MON/mon_features", "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n"},
          {"info/last_cmd_status", "ok\n"},
          {"schemata",
           "    L3:0=ffff;1=ffff;2=ffff;3=ffff;4=ffff;5=ffff;6=ffff;7=ffff\n"
           "    MB:0=2048;1=2048;2=2048;3=2048;4=2048;5=2048;6=2048;7=2048\n"
           "  SMBA:0=2048;1=2048;2=2048;3=2048;4=2048;5=2048;6=2048;7=2048\n"},
          {"tasks", "1\n"}};
}

inline std::map<std::string, std::string> grace() {
  return {{"info/L3/cbm_mask", "fff\n"},
          {"info/L3/min_cbm_bits", "1\n"},
          {"info/L3/num_closids", "32\n"},
          {"info/MB/bandwidth_gran", "1\n"},
          {"info/MB/delay_linear", "1\n"},
          {"info/MB/min_bandwidth", "1\n"},
          {"info/MB/num_closids", "32\n"},
          {"info/L3_MON/num_rmids", "32\n"},
          {"info/L3_MON/mon_features", "llc_occupancy\nmbm_total_bytes\n"},
          {"info/last_cmd_status", "ok\n"},
          {"schemata", "L3:1=fff\nMB:1=100\n"},
          {"tasks", "1\n"}};
}


}  // namespace superoffload::resctrl::testing
