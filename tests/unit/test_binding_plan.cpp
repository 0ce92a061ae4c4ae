// Binding decisions on synthetic nodes: disjoint even shares, GPU-near NUMA nodes, launcher
// bindings kept, oversubscription spread evenly.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>

#include "base/error.hpp"
#include "cluster/binding_plan.hpp"
#include "cluster/cpu_set.hpp"
#include "cluster/launcher_binding.hpp"
#include "cluster/topology.hpp"

namespace so = superoffload::cluster;

namespace {

// A node of `numa` NUMA nodes with `cores` cores each and `smt` threads per core, numbered
// like Linux does (core c of node n: CPU n*cores + c; its sibling + numa*cores).
std::vector<so::Core> node(int numa, int cores, int smt = 1) {
  std::vector<so::Core> out;
  const int total = numa * cores;
  for (int n = 0; n < numa; ++n) {
    for (int c = 0; c < cores; ++c) {
      std::vector<int> pus;
      for (int t = 0; t < smt; ++t) pus.push_back(n * cores + c + t * total);
      out.push_back(so::Core{n, so::CpuSet(pus)});
    }
  }
  return out;
}

so::CpuSet all_cpus(const std::vector<so::Core>& cores) {
  std::vector<int> all;
  for (const auto& c : cores) all.insert(all.end(), c.pus.cpus().begin(), c.pus.cpus().end());
  return so::CpuSet(all);
}

// Runs both phases for every local rank, as bind_ranks does over MPI.
std::vector<so::CpuSet> plan_node(so::BindingRequest base) {
  std::vector<so::BindingIntent> intents;
  for (int r = 0; r < base.local_size; ++r) {
    base.local_rank = r;
    intents.push_back(so::decide_binding(base));
  }
  std::vector<so::CpuSet> out;
  for (int r = 0; r < base.local_size; ++r) {
    int index = 0, count = 0;
    for (int p = 0; p < base.local_size; ++p) {
      if (intents[static_cast<size_t>(p)].candidate_cores != intents[static_cast<size_t>(r)].candidate_cores) continue;
      if (p < r) ++index;
      ++count;
    }
    out.push_back(so::cpus_of(base.allowed_cores,
                              so::share_of(intents[static_cast<size_t>(r)].candidate_cores, index, count)));
  }
  return out;
}

void expect_disjoint(const std::vector<so::CpuSet>& sets) {
  for (size_t a = 0; a < sets.size(); ++a) {
    EXPECT_FALSE(sets[a].empty()) << "rank " << a;
    for (size_t b = a + 1; b < sets.size(); ++b) {
      EXPECT_FALSE(sets[a].intersects(sets[b])) << "ranks " << a << " and " << b << " share "
                                                << sets[a].intersection(sets[b]).to_string();
    }
  }
}

TEST(CpuSet, FormatsAndParsesLists) {
  EXPECT_EQ(so::CpuSet({0, 1, 2, 3, 8, 10, 11}).to_string(), "0-3,8,10-11");
  EXPECT_EQ(so::CpuSet::parse("0-3,8,10-11"), so::CpuSet({0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(so::CpuSet::parse("").size(), 0u);
  EXPECT_THROW(so::CpuSet::parse("3-1"), superoffload::Error);
  EXPECT_THROW(so::CpuSet::parse("a"), superoffload::Error);
}

TEST(ShareOf, EvenContiguousBlocks) {
  const std::vector<int> cores = {0, 1, 2, 3, 4, 5, 6};
  EXPECT_EQ(so::share_of(cores, 0, 2), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(so::share_of(cores, 1, 2), (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(so::share_of(cores, 2, 3), (std::vector<int>{5, 6}));
}

TEST(ShareOf, MorePeersThanCoresSpreadEvenly) {
  const std::vector<int> cores = {0, 1};
  std::map<int, int> uses;
  for (int i = 0; i < 4; ++i) {
    auto share = so::share_of(cores, i, 4);
    ASSERT_EQ(share.size(), 1u);
    ++uses[share[0]];
  }
  EXPECT_EQ(uses[0], 2);
  EXPECT_EQ(uses[1], 2);
}

TEST(DecideBinding, CpuNodeSplitsAllCoresAmongRanks) {
  so::BindingRequest request;
  request.allowed_cores = node(2, 8, 2);
  request.current = all_cpus(request.allowed_cores);
  request.local_size = 4;
  const auto sets = plan_node(request);
  expect_disjoint(sets);
  for (const auto& set : sets) EXPECT_EQ(so::cores_in(request.allowed_cores, set), 4);
  // Contiguous blocks stay inside one NUMA node when the split allows it.
  EXPECT_EQ(sets[0], so::CpuSet::parse("0-3,16-19"));
  EXPECT_EQ(sets[3], so::CpuSet::parse("12-15,28-31"));
}

TEST(DecideBinding, GpuRanksGetTheCoresOfTheNearestNumaNode) {
  // Two NUMA nodes of 8 cores; GPUs 0,1 near node 0 and GPUs 2,3 near node 1 (an x86 node
  // with 4 GPUs). The locality sysfs reports is the NUMA node's CPUs.
  so::BindingRequest request;
  request.allowed_cores = node(2, 8);
  request.current = all_cpus(request.allowed_cores);
  request.local_size = 4;
  request.visible_gpus = 4;
  request.gpu_locality = {so::CpuSet::parse("0-7"), so::CpuSet::parse("0-7"), so::CpuSet::parse("8-15"),
                          so::CpuSet::parse("8-15")};
  const auto sets = plan_node(request);
  expect_disjoint(sets);
  EXPECT_EQ(sets[0], so::CpuSet::parse("0-3"));
  EXPECT_EQ(sets[1], so::CpuSet::parse("4-7"));
  EXPECT_EQ(sets[2], so::CpuSet::parse("8-11"));
  EXPECT_EQ(sets[3], so::CpuSet::parse("12-15"));
  request.local_rank = 3;
  EXPECT_EQ(so::decide_binding(request).gpu, 3);
}

TEST(DecideBinding, Gh200NodeOneGracePerGpu) {
  // 4 GH200 superchips: 72 Grace cores each; one rank per GPU gets its whole Grace.
  so::BindingRequest request;
  request.allowed_cores = node(4, 72);
  request.current = all_cpus(request.allowed_cores);
  request.local_size = 4;
  request.visible_gpus = 4;
  for (int g = 0; g < 4; ++g) {
    request.gpu_locality.push_back(so::CpuSet::parse(std::to_string(72 * g) + "-" + std::to_string(72 * g + 71)));
  }
  const auto sets = plan_node(request);
  expect_disjoint(sets);
  for (int g = 0; g < 4; ++g) EXPECT_EQ(sets[static_cast<size_t>(g)].size(), 72u);
  EXPECT_EQ(sets[2], so::CpuSet::parse("144-215"));
}

TEST(DecideBinding, LauncherBindingIsKept) {
  so::BindingRequest request;
  request.allowed_cores = node(1, 4);
  request.current = so::CpuSet::parse("2");
  auto intent = so::decide_binding(request);
  EXPECT_EQ(intent.source, so::BindingSource::launcher);
  EXPECT_TRUE(intent.candidate_cores.empty());
}

TEST(DecideBinding, LauncherDefaultOnAGh200NodeIsReplacedByTheGpusGrace) {
  // mpirun -np 4 on 4 GH200: Open MPI's default bound each rank to one core; each gets the 72
  // cores of the Grace next to its GPU instead.
  so::BindingRequest request;
  request.allowed_cores = node(4, 72);
  request.local_size = 4;
  request.visible_gpus = 4;
  request.launcher_default = true;
  for (int g = 0; g < 4; ++g) {
    request.gpu_locality.push_back(so::CpuSet::parse(std::to_string(72 * g) + "-" + std::to_string(72 * g + 71)));
  }
  for (int r = 0; r < 4; ++r) {
    request.local_rank = r;
    request.current = so::CpuSet::parse(std::to_string(r));
    const auto intent = so::decide_binding(request);
    EXPECT_EQ(intent.source, so::BindingSource::launcher_widened);
    EXPECT_EQ(so::cpus_of(request.allowed_cores, intent.candidate_cores),
              so::CpuSet::parse(std::to_string(72 * r) + "-" + std::to_string(72 * r + 71)));
  }
  EXPECT_STREQ(so::to_string(so::BindingSource::launcher_widened), "launcher (default, widened)");
  EXPECT_STREQ(so::to_string(so::BindingSource::launcher), "launcher (asked)");
}

// The environment Open MPI 4.1's mpirun gives a rank (measured): orte_launch always,
// orte_bound_at_launch when it bound the rank, and the binding options as MCA parameters.
so::LauncherBinding classify(std::map<std::string, std::string> env, std::vector<std::string> files = {}) {
  return so::classify_launcher_binding(
      [&](const std::string& name) -> std::optional<std::string> {
        const auto it = env.find(name);
        return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
      },
      files);
}

TEST(LauncherBinding, OpenMpisDefaultIsToldFromAnAskedBinding) {
  using Kind = so::LauncherBinding::Kind;
  const std::map<std::string, std::string> mpirun = {{"OMPI_MCA_orte_launch", "1"}, {"OMPI_MCA_orte_bound_at_launch", "1"}};
  EXPECT_EQ(classify(mpirun).kind, Kind::defaulted);
  // --map-by without PE= maps; the binding is still the default.
  auto mapped = mpirun;
  mapped["OMPI_MCA_rmaps_base_mapping_policy"] = "core";
  EXPECT_EQ(classify(mapped).kind, Kind::defaulted);
  const std::vector<std::pair<std::string, std::string>> asked = {
      {"OMPI_MCA_hwloc_base_binding_policy", "core"},     // --bind-to core, --mca, an exported variable
      {"OMPI_MCA_hwloc_base_cpu_set", "1"},               // --cpu-set 1
      {"OMPI_MCA_orte_rankfile", "/tmp/ranks"},           // --rankfile (Open MPI 4.1)
      {"OMPI_MCA_rmaps_rank_file_path", "/tmp/ranks"},    // its newer name
      {"OMPI_MCA_rmaps_base_mapping_policy", "numa:PE=8"}  // --map-by numa:PE=8
  };
  for (const auto& [name, value] : asked) {
    auto env = mpirun;
    env[name] = value;
    const auto binding = classify(env);
    EXPECT_EQ(binding.kind, Kind::asked) << name;
    EXPECT_NE(binding.how.find(value), std::string::npos) << binding.how;
  }
  EXPECT_EQ(classify(mpirun, {"# site defaults\nhwloc_base_binding_policy = core\n"}).kind, Kind::asked);
  EXPECT_EQ(classify(mpirun, {"# hwloc_base_binding_policy = core\n"}).kind, Kind::defaulted);
  // srun binds as asked, also inside an allocation; taskset and numactl leave no trace: asked.
  const auto srun = classify({{"SLURM_STEP_ID", "0"}, {"SLURM_JOB_ID", "7"}, {"SLURM_CPUS_PER_TASK", "72"}});
  EXPECT_EQ(srun.kind, Kind::asked);
  EXPECT_EQ(srun.how, "srun --cpus-per-task=72");
  EXPECT_EQ(classify({{"SLURM_STEP_ID", "0"}, {"SLURM_CPU_BIND", "quiet,cores"}}).how, "srun --cpu-bind=quiet,cores");
  EXPECT_EQ(classify({}).kind, Kind::asked);
}

TEST(DecideBinding, NoneMeansNoBinding) {
  so::BindingRequest request;
  request.mode = so::BindMode::none;
  request.allowed_cores = node(1, 4);
  request.current = all_cpus(request.allowed_cores);
  EXPECT_EQ(so::decide_binding(request).source, so::BindingSource::none);
}

TEST(DecideBinding, UnknownGpuLocalityFallsBackWithANote) {
  so::BindingRequest request;
  request.allowed_cores = node(1, 4);
  request.current = all_cpus(request.allowed_cores);
  request.visible_gpus = 1;
  request.gpu_locality = {so::CpuSet()};
  auto intent = so::decide_binding(request);
  EXPECT_EQ(intent.candidate_cores.size(), 4u);
  ASSERT_FALSE(intent.notes.empty());
  EXPECT_NE(intent.notes.back().find("unknown"), std::string::npos);
}

TEST(Topology, SyntheticHwlocTopologyFeedsThePlanner) {
  auto topology = so::Topology::synthetic("package:2 numa:1 core:4 pu:2");
  const auto cores = topology.allowed_cores();
  ASSERT_EQ(cores.size(), 8u);
  std::set<int> numa;
  for (const auto& core : cores) {
    EXPECT_EQ(core.pus.size(), 2u);
    numa.insert(core.numa_node);
  }
  EXPECT_EQ(numa, (std::set<int>{0, 1}));
  so::BindingRequest request;
  request.allowed_cores = cores;
  request.current = all_cpus(cores);
  request.local_size = 2;
  const auto sets = plan_node(request);
  expect_disjoint(sets);
  EXPECT_EQ(topology.numa_nodes_of(sets[0]), (std::vector<int>{0}));
  EXPECT_EQ(topology.numa_nodes_of(sets[1]), (std::vector<int>{1}));
}

}  // namespace
