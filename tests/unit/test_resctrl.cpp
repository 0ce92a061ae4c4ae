// Reading resctrl trees that the tests make (tests/unit/resctrl_fake_trees.hpp: Sapphire Rapids,
// Zen 4 and Grace layouts, and where their values come from). The kernel's side is not exercised here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "resctrl/resctrl.hpp"

#include "resctrl_fake_trees.hpp"

namespace {

namespace fs = std::filesystem;
namespace rc = superoffload::resctrl;
using namespace superoffload::resctrl::testing;

TEST(Resctrl, SapphireRapidsRdt) {
  FakeTree tree(sapphire_rapids());
  const auto r = rc::read_tree(tree.root());
  ASSERT_TRUE(r.problems.empty()) << r.problems.front();
  ASSERT_EQ(r.caches.size(), 1u);
  EXPECT_EQ(r.caches[0].name, "L3");
  EXPECT_EQ(r.caches[0].mask_bits, 15);
  EXPECT_EQ(r.caches[0].min_bits, 1);
  EXPECT_FALSE(r.caches[0].sparse_masks);
  EXPECT_EQ(r.caches[0].domains, (std::vector<int>{0, 1}));
  ASSERT_EQ(r.bandwidth.size(), 1u);
  EXPECT_EQ(r.bandwidth[0].min, 10);
  EXPECT_EQ(r.bandwidth[0].granularity, 10);
  EXPECT_EQ(r.bandwidth[0].max, 100);
  EXPECT_TRUE(r.bandwidth[0].linear);
  EXPECT_EQ(r.control_groups(), 8);  // the fewest of all resources: MB's
  ASSERT_TRUE(r.monitoring.has_value());
  EXPECT_EQ(r.monitoring->counters, 224);
  EXPECT_TRUE(r.monitoring->has("mbm_local_bytes"));
  const auto line = rc::describe(r);
  EXPECT_NE(line.find("L3 15-bit masks, at least 1 bit, contiguous, domains 0,1"), std::string::npos) << line;
  EXPECT_NE(line.find("MB 10-100 in steps of 10, domains 0,1"), std::string::npos) << line;
  EXPECT_NE(line.find("8 control groups"), std::string::npos) << line;
  EXPECT_NE(line.find("monitoring llc_occupancy mbm_total_bytes mbm_local_bytes (224 counters)"), std::string::npos)
      << line;
}

TEST(Resctrl, AmdZen4Pqos) {
  FakeTree tree(amd_zen4());
  const auto r = rc::read_tree(tree.root());
  ASSERT_TRUE(r.problems.empty()) << r.problems.front();
  ASSERT_EQ(r.caches.size(), 1u);
  EXPECT_EQ(r.caches[0].mask_bits, 16);
  EXPECT_EQ(r.caches[0].min_bits, 0);
  EXPECT_TRUE(r.caches[0].sparse_masks);
  EXPECT_EQ(r.caches[0].domains.size(), 8u);
  ASSERT_EQ(r.bandwidth.size(), 2u);  // MB and SMBA, in name order
  EXPECT_EQ(r.bandwidth[0].name, "MB");
  EXPECT_EQ(r.bandwidth[0].max, 2048);
  EXPECT_FALSE(r.bandwidth[0].linear);
  EXPECT_EQ(r.bandwidth[1].name, "SMBA");
  EXPECT_EQ(r.control_groups(), 16);
  const auto line = rc::describe(r);
  EXPECT_NE(line.find("L3 16-bit masks, empty allowed, sparse allowed, domains 0,1,2,3,4,5,6,7"), std::string::npos)
      << line;
  EXPECT_NE(line.find("MB 0-2048 in steps of 1 (non-linear)"), std::string::npos) << line;
}

TEST(Resctrl, GraceMpam) {
  FakeTree tree(grace());
  const auto r = rc::read_tree(tree.root());
  ASSERT_TRUE(r.problems.empty()) << r.problems.front();
  ASSERT_EQ(r.caches.size(), 1u);
  EXPECT_EQ(r.caches[0].mask_bits, 12);
  EXPECT_EQ(r.caches[0].domains, (std::vector<int>{1}));
  ASSERT_EQ(r.bandwidth.size(), 1u);
  EXPECT_EQ(r.bandwidth[0].max, 100);
  ASSERT_TRUE(r.monitoring.has_value());
  EXPECT_TRUE(r.monitoring->has("mbm_total_bytes"));
  EXPECT_FALSE(r.monitoring->has("mbm_local_bytes"));
  EXPECT_EQ(r.control_groups(), 32);
}

TEST(Resctrl, MountTable) {
  FakeTree tree(std::map<std::string, std::string>{{"mounts",
                  "sysfs /sys sysfs rw,nosuid 0 0\n"
                  "resctrl /sys/fs/res\\040ctrl resctrl rw,relatime 0 0\n"}});
  EXPECT_EQ(rc::find_mount(tree.root() + "/mounts"), std::optional<std::string>("/sys/fs/res ctrl"));
  tree.write("mounts", "proc /proc proc rw 0 0\n");
  EXPECT_FALSE(rc::find_mount(tree.root() + "/mounts").has_value());
  EXPECT_FALSE(rc::find_mount(tree.root() + "/no-such-file").has_value());
  const auto none = rc::detect(tree.root() + "/mounts");
  EXPECT_FALSE(none.mounted());
  EXPECT_EQ(rc::describe(none).rfind("resctrl: not mounted", 0), 0u) << rc::describe(none);
}

// Broken trees: each bad file is named, its resource is left out, the rest is read, and
// nothing throws (training goes on unpartitioned).
TEST(Resctrl, MalformedTreesAreReportedNotFatal) {
  {
    FakeTree tree(sapphire_rapids());
    tree.write("info/L3/cbm_mask", "zz\n");
    tree.write("info/MB/bandwidth_gran", "-3\n");
    const auto r = rc::read_tree(tree.root());
    EXPECT_TRUE(r.caches.empty());
    EXPECT_TRUE(r.bandwidth.empty());
    EXPECT_TRUE(r.monitoring.has_value());
    ASSERT_EQ(r.problems.size(), 2u);
    EXPECT_EQ(r.problems[0], "info/L3/cbm_mask: not a hex mask ('zz')");
    EXPECT_EQ(r.problems[1], "info/MB/bandwidth_gran: not a count ('-3')");
    EXPECT_NE(rc::describe(r).find("2 problem(s): info/L3/cbm_mask"), std::string::npos) << rc::describe(r);
  }
  {
    FakeTree tree(sapphire_rapids());
    tree.write("info/L3/cbm_mask", "7ff0\n");  // not a run of ones from bit 0
    tree.write("info/L3_MON/num_rmids", "99999999999999999999\n");
    tree.remove("info/MB/num_closids");
    tree.write("schemata", "garbage\n    L3:0=7fff;x=1\n");
    const auto r = rc::read_tree(tree.root());
    EXPECT_TRUE(r.caches.empty());
    EXPECT_TRUE(r.bandwidth.empty());
    EXPECT_FALSE(r.monitoring.has_value());
    std::string all;
    for (const auto& p : r.problems) all += p + "\n";
    EXPECT_NE(all.find("info/L3/cbm_mask: not a run of ones from bit 0 (7ff0)"), std::string::npos) << all;
    EXPECT_NE(all.find("info/L3_MON/num_rmids: not a count"), std::string::npos) << all;
    EXPECT_NE(all.find("info/MB/num_closids: missing or unreadable"), std::string::npos) << all;
    EXPECT_NE(all.find("schemata: a line without 'NAME:' ('garbage')"), std::string::npos) << all;
    EXPECT_NE(all.find("schemata: a malformed domain entry ('x=1')"), std::string::npos) << all;
  }
  {
    FakeTree tree(sapphire_rapids());
    tree.write("info/L3/min_cbm_bits", "16\n");  // more than the 15-bit mask has
    tree.write("info/MB/min_bandwidth", "200\n");  // above the root group's 100
    const auto r = rc::read_tree(tree.root());
    EXPECT_TRUE(r.caches.empty());
    EXPECT_TRUE(r.bandwidth.empty());
    ASSERT_EQ(r.problems.size(), 2u);
    EXPECT_EQ(r.problems[0], "info/L3/min_cbm_bits: 16 above the mask's 15 bits");
    EXPECT_EQ(r.problems[1], "info/MB/min_bandwidth: 200 above the root group's 100");
  }
  {
    FakeTree tree(std::map<std::string, std::string>{{"tasks", "1\n"}});  // mounted, but no info/
    const auto r = rc::read_tree(tree.root());
    ASSERT_EQ(r.problems.size(), 1u);
    EXPECT_EQ(r.problems[0], "info: missing (not a resctrl tree, or no resource is enabled)");
    EXPECT_NE(rc::describe(r).find("no usable resource"), std::string::npos) << rc::describe(r);
  }
}

// Every file of a tree replaced in turn by random bytes (seeded): never a throw or a crash, and
// whatever is left is still described.
TEST(Resctrl, RandomBytesInAnyFile) {
  std::mt19937 random(20261126);
  const auto files = sapphire_rapids();
  for (int round = 0; round < 8; ++round) {
    for (const auto& [path, content] : files) {
      FakeTree tree(files);
      std::string junk(random() % 40, '\0');
      for (auto& c : junk) c = static_cast<char>(random() % 256);
      tree.write(path, junk);
      rc::Resctrl r;
      EXPECT_NO_THROW(r = rc::read_tree(tree.root())) << path;
      EXPECT_FALSE(rc::describe(r).empty());
    }
  }
}

}  // namespace
