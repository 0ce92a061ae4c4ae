// Partitioning on fake resctrl trees (resctrl_fake_trees.hpp): the schemata of the two groups
// for three kinds of node, the masks checked against info/, each decision and its reason, the
// groups made, filled one task id per write and removed (also by the signal-safe path and as
// stale groups of ended runs), a write the kernel refuses reported with info/last_cmd_status,
// and the counters. The kernel's side (what a real tree accepts) is not exercised here.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "base/error.hpp"
#include "resctrl/decision.hpp"
#include "resctrl/monitor.hpp"
#include "resctrl/partition.hpp"
#include "resctrl/resctrl.hpp"
#include "resctrl/schemata.hpp"

#include "resctrl_fake_trees.hpp"

namespace {

namespace fs = std::filesystem;
namespace rc = superoffload::resctrl;
using namespace superoffload::resctrl::testing;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ResctrlSchemata, ThreeNodes) {
  {
    FakeTree tree(sapphire_rapids());
    const auto s = rc::plan_schemata(rc::read_tree(tree.root()), {1}, {.optimizer_cache = 0.25, .optimizer_bandwidth = 0.5});
    ASSERT_TRUE(s.error.empty()) << s.error;
    EXPECT_EQ(s.optimizer, "L3:1=f\nMB:1=50\n");  // 15 ways: 4 low ones; the socket's domain only
    EXPECT_EQ(s.rest, "L3:1=7ff0\n");  // the rest's bandwidth is never written: a new group has all of it
    EXPECT_EQ(s.summary,
              "L3 4 of 15 ways to the optimizer (f), 11 to the rest (7ff0) on domain(s) 1; MB 50 of 100 for the "
              "optimizer");
  }
  {
    FakeTree tree(amd_zen4());
    // Two CCXs of the rank; MB and SMBA in 1/8 GB/s units up to 2048.
    const auto s = rc::plan_schemata(rc::read_tree(tree.root()), {2, 3}, {.optimizer_cache = 0.125, .optimizer_bandwidth = 0.75});
    ASSERT_TRUE(s.error.empty()) << s.error;
    EXPECT_EQ(s.optimizer, "L3:2=3;3=3\nMB:2=1536;3=1536\nSMBA:2=1536;3=1536\n");
    EXPECT_EQ(s.rest, "L3:2=fffc;3=fffc\n");
  }
  {
    FakeTree tree(grace());
    // The rank's cache id is not among the tree's domains (numbered otherwise): all of them.
    const auto s = rc::plan_schemata(rc::read_tree(tree.root()), {0}, {});
    ASSERT_TRUE(s.error.empty()) << s.error;
    EXPECT_EQ(s.optimizer, "L3:1=7\n");  // uncapped: no MB line at all
    EXPECT_EQ(s.rest, "L3:1=ff8\n");
    EXPECT_EQ(s.summary, "L3 3 of 12 ways to the optimizer (7), 9 to the rest (ff8) on domain(s) 1; MB uncapped");
  }
  {
    // Mounted with mba_MBps: MB in MB/s with no top to take a share of; left out, caches kept.
    FakeTree tree(sapphire_rapids());
    tree.write("schemata", "    L3:0=7fff;1=7fff\n    MB:0=4294967295;1=4294967295\n");
    const auto r = rc::read_tree(tree.root());
    EXPECT_TRUE(r.bandwidth.empty());
    ASSERT_EQ(r.problems.size(), 1u);
    EXPECT_EQ(r.problems[0], "schemata: MB in MB/s without an upper value (mba_MBps): no share of it can be set");
    EXPECT_EQ(rc::plan_schemata(r, {0}, {.optimizer_bandwidth = 0.5}).optimizer, "L3:0=f\n");
  }
}

TEST(ResctrlSchemata, LimitsOfTheHardware) {
  FakeTree tree(sapphire_rapids());
  auto r = rc::read_tree(tree.root());
  // A tiny share still leaves each side min_cbm_bits; a huge one leaves the rest as many.
  r.caches[0].min_bits = 2;
  EXPECT_EQ(rc::plan_schemata(r, {}, {.optimizer_cache = 0.01}).optimizer.substr(0, 11), "L3:0=3;1=3\n");
  EXPECT_EQ(rc::plan_schemata(r, {}, {.optimizer_cache = 0.99}).rest.substr(0, 16), "L3:0=6000;1=6000");
  // Too few ways for two groups.
  r.caches[0].mask_bits = 3;
  EXPECT_EQ(rc::plan_schemata(r, {}, {}).error, "L3 has 3 ways and masks of at least 2: too few to split between two groups");
  r = rc::read_tree(tree.root());
  // MB's minimum is 10 percent: 4 percent is refused, not raised behind the user's back.
  EXPECT_EQ(rc::plan_schemata(r, {}, {.optimizer_bandwidth = 0.04}).error,
            "an optimizer bandwidth share of 0.04 is 0 of MB's 100, below its minimum (info/MB/min_bandwidth 10)");
  // Rounded to the 10-percent granularity.
  EXPECT_NE(rc::plan_schemata(r, {}, {.optimizer_bandwidth = 0.33}).optimizer.find("MB:0=30;1=30"), std::string::npos);
  EXPECT_FALSE(rc::plan_schemata(r, {}, {.optimizer_cache = 1.0}).error.empty());
}

TEST(ResctrlSchemata, MasksCheckedAgainstInfo) {
  rc::CacheResource l3{.name = "L3", .mask_bits = 12, .min_bits = 2};
  EXPECT_EQ(rc::check_mask(l3, 0x3), "");
  EXPECT_EQ(rc::check_mask(l3, 0x1000), "mask 1000 is wider than info/L3/cbm_mask (fff)");
  EXPECT_EQ(rc::check_mask(l3, 0x1), "mask 1 has 1 bit(s), fewer than info/L3/min_cbm_bits (2)");
  EXPECT_EQ(rc::check_mask(l3, 0x33), "mask 33 is not contiguous, and info/L3/sparse_masks does not allow that");
  l3.sparse_masks = true;
  EXPECT_EQ(rc::check_mask(l3, 0x33), "");
}

TEST(ResctrlSchemata, CacheIdsOfCpus) {
  FakeTree sysfs(std::map<std::string, std::string>{{"cpu0/cache/index2/level", "2\n"},
                                                    {"cpu0/cache/index2/id", "0\n"},
                                                    {"cpu0/cache/index3/level", "3\n"},
                                                    {"cpu0/cache/index3/id", "4\n"},
                                                    {"cpu1/cache/index3/level", "3\n"},
                                                    {"cpu1/cache/index3/id", "4\n"},
                                                    {"cpu2/cache/index3/level", "3\n"},
                                                    {"cpu2/cache/index3/id", "5\n"}});
  EXPECT_EQ(rc::cache_ids_of_cpus({0, 1}, sysfs.root()), (std::vector<int>{4}));
  EXPECT_EQ(rc::cache_ids_of_cpus({0, 2, 7}, sysfs.root()), (std::vector<int>{4, 5}));  // cpu7: unknown
}

TEST(ResctrlDecision, EachActionAndWhy) {
  FakeTree tree(grace());
  tree.write("mon_groups/.keep", "");
  auto r = rc::read_tree(tree.root());
  using rc::Action;
  const auto decide = [&](rc::Mode mode, int ranks, const std::string& job = "", bool threads = true) {
    return rc::decide(r, mode, {}, job, ranks, {}, threads);
  };
  EXPECT_EQ(decide(rc::Mode::off, 1).action, Action::none);
  EXPECT_EQ(rc::describe(decide(rc::Mode::off, 1)), "does nothing: [runtime] resctrl = \"off\"");
  EXPECT_EQ(decide(rc::Mode::automatic, 4).action, Action::per_rank);
  EXPECT_EQ(decide(rc::Mode::automatic, 4).why, "31 control groups free for 4 rank(s)");
  EXPECT_EQ(decide(rc::Mode::automatic, 16).action, Action::per_node);
  EXPECT_EQ(decide(rc::Mode::automatic, 1, "", false).why,
            "no thread runs the optimizer alone ([offload] device = \"none\", or one optimizer thread)");
  // Groups of the job's prolog are adopted, whatever else the tree allows.
  tree.write("superoffload.123.optimizer/schemata", "L3:1=3\n");
  tree.write("superoffload.123.rest/schemata", "L3:1=ffc\n");
  const auto adopted = decide(rc::Mode::required, 4, "123");
  EXPECT_EQ(adopted.action, Action::adopt);
  EXPECT_EQ(adopted.optimizer_dir, tree.root() + "/superoffload.123.optimizer");
  EXPECT_TRUE(adopted.partitions());
  // 32 control groups: the default, the prolog's two and 27 others taken leave two (per node),
  // one more leaves one (monitoring only).
  for (int i = 0; i < 27; ++i) tree.write("other." + std::to_string(i) + "/tasks", "");
  r = rc::read_tree(tree.root());
  EXPECT_EQ(decide(rc::Mode::automatic, 4).action, Action::per_node);
  tree.write("other.27/tasks", "");
  EXPECT_EQ(decide(rc::Mode::automatic, 4).action, Action::monitor);
  EXPECT_EQ(decide(rc::Mode::automatic, 4).why, "only 1 control group(s) free, two are needed");
  // Read-only (an unprivileged user, no prolog): nothing, and where to look.
  r.writable = false;
  fs::permissions(tree.root() + "/mon_groups", fs::perms::owner_write, fs::perm_options::remove);
  const auto read_only = decide(rc::Mode::automatic, 4);
  if (::geteuid() != 0) {  // root may write anyway
    EXPECT_EQ(read_only.action, Action::none);
    EXPECT_NE(read_only.why.find("jobscripts/admin/resctrl-prolog.sh"), std::string::npos) << read_only.why;
  }
  EXPECT_NE(read_only.why.find("read-only"), std::string::npos) << read_only.why;
  fs::permissions(tree.root() + "/mon_groups", fs::perms::owner_write, fs::perm_options::add);
  // Not mounted.
  EXPECT_EQ(rc::decide(rc::Resctrl{}, rc::Mode::automatic, {}, "", 1, {}, true).why,
            "resctrl is not mounted on this node");
}

// The groups, their schemata and tasks (one id per line: one per write), and their removal.
TEST(ResctrlPartition, MakeAssignRemove) {
  FakeTree tree(grace());
  tree.write("mon_groups/.keep", "");
  const auto r = rc::read_tree(tree.root());
  const auto schemata = rc::plan_schemata(r, {}, {.optimizer_bandwidth = 0.5});
  std::thread helper([] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
  const pid_t helper_tid = [&] {
    for (const auto& entry : fs::directory_iterator("/proc/self/task")) {
      const pid_t tid = std::stoi(entry.path().filename().string());
      if (tid != ::gettid()) return tid;
    }
    return pid_t{0};
  }();
  {
    auto p = rc::Partition::create(tree.root(), rc::group_prefix("", ::getpid()), rc::GroupKind::control, schemata);
    const std::string optimizer = tree.root() + "/superoffload.nojob." + std::to_string(::getpid()) + ".optimizer";
    EXPECT_EQ(p.optimizer_dir(), optimizer);
    EXPECT_EQ(read(optimizer + "/schemata"), "L3:1=7\nMB:1=50\n");
    EXPECT_EQ(read(p.rest_dir() + "/schemata"), "L3:1=ff8\n");
    p.assign({helper_tid});
    EXPECT_EQ(read(optimizer + "/tasks"), std::to_string(helper_tid) + "\n");
    const auto rest = read(p.rest_dir() + "/tasks");
    EXPECT_NE(rest.find(std::to_string(::gettid()) + "\n"), std::string::npos) << rest;
    EXPECT_EQ(rest.find(std::to_string(helper_tid) + "\n"), std::string::npos) << rest;
  }
  helper.join();
  EXPECT_FALSE(fs::exists(tree.root() + "/superoffload.nojob." + std::to_string(::getpid()) + ".optimizer"));
  // Monitoring groups go under mon_groups, without schemata.
  {
    auto p = rc::Partition::create(tree.root(), "superoffload.7.1", rc::GroupKind::monitor, schemata);
    EXPECT_EQ(p.rest_dir(), tree.root() + "/mon_groups/superoffload.7.1.rest");
    EXPECT_FALSE(fs::exists(p.rest_dir() + "/schemata"));
  }
  EXPECT_FALSE(fs::exists(tree.root() + "/mon_groups/superoffload.7.1.rest"));
  // Adopted groups stay.
  tree.write("superoffload.9.optimizer/tasks", "");
  tree.write("superoffload.9.rest/tasks", "");
  {
    auto p = rc::Partition::adopt(tree.root(), tree.root() + "/superoffload.9.optimizer", tree.root() + "/superoffload.9.rest");
    p.assign({});
  }
  EXPECT_TRUE(fs::exists(tree.root() + "/superoffload.9.optimizer/tasks"));
}

// The path the SIGTERM handler and a failing rank's abort take: in a child, which then ends
// without running any destructor.
TEST(ResctrlPartition, SignalSafeRemoval) {
  FakeTree tree(grace());
  const auto schemata = rc::plan_schemata(rc::read_tree(tree.root()), {}, {});
  const pid_t child = ::fork();
  if (child == 0) {
    auto* p = new rc::Partition(rc::Partition::create(tree.root(), "superoffload.1.2", rc::GroupKind::control, schemata));
    (void)p;  // never destroyed
    std::ofstream(tree.root() + "/superoffload.1.2.optimizer/mon_data/mon_L3_01/llc_occupancy") << "0\n";
    ::raise(SIGTERM);  // the default action after the groups are gone
    ::_exit(3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_FALSE(fs::exists(tree.root() + "/superoffload.1.2.optimizer"));
  EXPECT_FALSE(fs::exists(tree.root() + "/superoffload.1.2.rest"));
}

TEST(ResctrlPartition, StaleGroupsOfEndedRuns) {
  FakeTree tree(grace());
  // A process that has ended: a child's pid after it exited.
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const std::string dead = "superoffload.55." + std::to_string(gone);
  tree.write(dead + ".optimizer/tasks", "");
  tree.write("mon_groups/" + dead + ".rest/tasks", "");
  tree.write("superoffload.55." + std::to_string(gone + 1000000) + ".rest/tasks", std::to_string(::gettid()) + "\n");  // a live thread in it
  tree.write("superoffload.55.optimizer/tasks", "");  // a prolog's
  tree.write("ioqos/tasks", "");                      // an administrator's
  auto removed = rc::remove_stale_groups(tree.root());
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{tree.root() + "/mon_groups/" + dead + ".rest",
                                               tree.root() + "/" + dead + ".optimizer"}));
  EXPECT_TRUE(fs::exists(tree.root() + "/superoffload.55.optimizer"));
  EXPECT_TRUE(fs::exists(tree.root() + "/ioqos"));
}

// A write the kernel refuses: the file named, with the kernel's reason.
TEST(ResctrlPartition, RefusedWriteReportsLastCmdStatus) {
  FakeTree tree(grace());
  tree.write("info/last_cmd_status", "Mask out of range\n");
  fs::create_directories(tree.root() + "/g");
  fs::create_symlink("/dev/full", tree.root() + "/g/schemata");  // every write fails (ENOSPC)
  try {
    rc::write_control(tree.root(), "g/schemata", "L3:1=fffff\n");
    FAIL() << "no error";
  } catch (const superoffload::Error& e) {
    const std::string text = e.describe();
    EXPECT_NE(text.find(tree.root() + "/g/schemata refused 'L3:1=fffff'"), std::string::npos) << text;
    EXPECT_NE(text.find("(info/last_cmd_status: Mask out of range)"), std::string::npos) << text;
  }
  // mkdir refused (no such directory above it): named, and nothing is left behind.
  EXPECT_THROW(rc::Partition::create(tree.root() + "/missing", "superoffload.1.1", rc::GroupKind::control, {}),
               superoffload::Error);
}

TEST(ResctrlMonitor, CountersAndBandwidth) {
  FakeTree tree(std::map<std::string, std::string>{{"g/mon_data/mon_L3_00/mbm_total_bytes", "1000000000\n"},
                                                   {"g/mon_data/mon_L3_00/llc_occupancy", "4096\n"},
                                                   {"g/mon_data/mon_L3_01/mbm_total_bytes", "0\n"},
                                                   {"g/mon_data/mon_L3_01/llc_occupancy", "4096\n"}});
  const auto g = tree.root() + "/g";
  EXPECT_EQ(rc::read_counters(g).bytes, 1e9);
  EXPECT_EQ(rc::read_counters(g).occupancy, 8192);
  rc::BandwidthMeter meter(g, 10.0);
  tree.write("g/mon_data/mon_L3_01/mbm_total_bytes", "3000000000\n");
  const auto sample = meter.sample(12.0);
  EXPECT_DOUBLE_EQ(sample.gb_per_s, 1.5);  // 3 GB in 2 s
  EXPECT_EQ(sample.occupancy_bytes, 8192);
  tree.write("g/mon_data/mon_L3_01/mbm_total_bytes", "Unavailable\n");  // the kernel's word for "not now"
  EXPECT_TRUE(std::isnan(meter.sample(13.0).gb_per_s));
  EXPECT_TRUE(std::isnan(rc::read_counters(g).bytes));
  // Only local traffic counted (mbm_local_bytes), and no counters at all.
  FakeTree local(std::map<std::string, std::string>{{"g/mon_data/mon_L3_00/mbm_local_bytes", "5\n"}});
  EXPECT_EQ(rc::read_counters(local.root() + "/g").bytes, 5);
  EXPECT_TRUE(std::isnan(rc::read_counters(local.root() + "/g").occupancy));
  EXPECT_TRUE(std::isnan(rc::read_counters(local.root() + "/none").bytes));
}

}  // namespace
