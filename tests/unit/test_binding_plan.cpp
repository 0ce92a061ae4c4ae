// Binding decisions on synthetic nodes: disjoint even shares, GPU-near NUMA nodes, launcher
// bindings kept, oversubscription spread evenly; and on the hwloc XML topologies of the node
// shapes users run on (tests/cluster/topologies: one GH200, four GH200, a DGX H100-like x86 node).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>

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
  const auto sets = so::plan_node(request);
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
  const auto sets = so::plan_node(request);
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
  const auto sets = so::plan_node(request);
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
  const auto sets = so::plan_node(request);
  expect_disjoint(sets);
  EXPECT_EQ(topology.numa_nodes_of(sets[0]), (std::vector<int>{0}));
  EXPECT_EQ(topology.numa_nodes_of(sets[1]), (std::vector<int>{1}));
}

// ---- Real node shapes, from hwloc XML (tests/cluster/topologies/make_topologies.py) ----

struct NodeShape {
  const char* file;
  size_t gpus, cores;
  std::vector<int> gpu_memory_nodes;  // NUMA nodes without CPUs: a GH200's HBM (and MIG) nodes
};

std::string topology_path(const char* file) {
  return std::string(SUPEROFFLOAD_SOURCE_DIR) + "/tests/cluster/topologies/" + file;
}

TEST(NodeShapes, EachRankGetsCoresOfItsGpusSocketAndMemoryOfItsCpuNode) {
  const std::vector<NodeShape> shapes{{"gh200.xml", 1, 72, {1, 2, 3, 4, 5, 6, 7, 8}},
                                      {"gh200x4.xml", 4, 288, {4, 12, 20, 28}},
                                      {"dgx_h100.xml", 8, 112, {}}};
  for (const auto& shape : shapes) {
    SCOPED_TRACE(shape.file);
    const auto topology = so::Topology::from_xml(topology_path(shape.file));
    const auto cores = topology.allowed_cores();
    const auto gpus = topology.nvidia_gpu_locality();
    ASSERT_EQ(cores.size(), shape.cores);
    ASSERT_EQ(gpus.size(), shape.gpus);
    for (const auto& core : cores) {  // a core's home is its socket's DDR/LPDDR node, never HBM
      EXPECT_EQ(std::count(shape.gpu_memory_nodes.begin(), shape.gpu_memory_nodes.end(), core.numa_node), 0);
    }
    for (const int ranks : {1, 2, 4, 8}) {
      SCOPED_TRACE(std::to_string(ranks) + " ranks");
      so::BindingRequest request;
      request.allowed_cores = cores;
      request.current = all_cpus(cores);
      request.local_size = ranks;
      request.visible_gpus = static_cast<int>(gpus.size());
      request.gpu_locality = gpus;
      const auto sets = so::plan_node(request);
      expect_disjoint(sets);
      // Ranks whose GPUs hang off one socket split its cores evenly (a DGX has four GPUs a socket).
      auto ranks_on_socket_of = [&](size_t gpu) {
        size_t count = 0;
        for (int p = 0; p < ranks; ++p) count += gpus[static_cast<size_t>(p) % gpus.size()] == gpus[gpu] ? 1 : 0;
        return count;
      };
      for (int r = 0; r < ranks; ++r) {
        const auto& mine = sets[static_cast<size_t>(r)];
        const auto gpu = static_cast<size_t>(r) % gpus.size();
        EXPECT_EQ(mine.intersection(gpus[gpu]), mine) << "rank " << r << " runs off its GPU's socket";
        const size_t socket_cores = static_cast<size_t>(so::cores_in(cores, gpus[gpu]));
        EXPECT_EQ(static_cast<size_t>(so::cores_in(cores, mine)), socket_cores / ranks_on_socket_of(gpu)) << "rank " << r;
        // The numa column of the start-up table (and where first-touch puts the rank's memory):
        // the socket's CPU node alone.
        const auto nodes = topology.numa_nodes_of(mine);
        ASSERT_EQ(nodes.size(), 1u) << "rank " << r;
        EXPECT_EQ(nodes, topology.numa_nodes_of(gpus[gpu]));
        EXPECT_EQ(std::count(shape.gpu_memory_nodes.begin(), shape.gpu_memory_nodes.end(), nodes[0]), 0);
        // The optimizer's threads: cpuadam_cores_perc of the rank's cores, one per core.
        const auto per_core = so::one_cpu_per_core(cores, mine);
        const auto optimizer = so::optimizer_cpus(per_core, 0.9);
        EXPECT_EQ(optimizer.size(), std::max<size_t>(1, static_cast<size_t>(0.9 * static_cast<double>(per_core.size()))));
        EXPECT_EQ(static_cast<size_t>(so::cores_in(cores, so::CpuSet(optimizer))), optimizer.size()) << "two threads on one core";
      }
    }
  }
}

TEST(NodeShapes, GraceNodesAndGpusAreWhereTheFactsPutThem) {
  const auto quad = so::Topology::from_xml(topology_path("gh200x4.xml"));
  const auto gpus = quad.nvidia_gpu_locality();
  ASSERT_EQ(gpus.size(), 4u);
  for (int g = 0; g < 4; ++g) {
    EXPECT_EQ(gpus[static_cast<size_t>(g)], so::CpuSet::parse(std::to_string(72 * g) + "-" + std::to_string(72 * g + 71)));
    EXPECT_EQ(quad.numa_nodes_of(gpus[static_cast<size_t>(g)]), (std::vector<int>{g}));  // not 4, 12, 20, 28
  }
  // DGX H100-like: GPUs 0-3 behind the first socket's PCIe switches, 4-7 behind the second's;
  // two threads per core, so a rank's 14 cores are 28 CPUs and its optimizer takes 12 of them
  // (0.9 x 14), one per core.
  const auto dgx = so::Topology::from_xml(topology_path("dgx_h100.xml"));
  const auto dgx_gpus = dgx.nvidia_gpu_locality();
  ASSERT_EQ(dgx_gpus.size(), 8u);
  EXPECT_EQ(dgx_gpus[0], so::CpuSet::parse("0-55,112-167"));
  EXPECT_EQ(dgx_gpus[7], so::CpuSet::parse("56-111,168-223"));
  const auto cores = dgx.allowed_cores();
  so::BindingRequest request;
  request.allowed_cores = cores;
  request.current = all_cpus(cores);
  request.local_size = 8;
  request.visible_gpus = 8;
  request.gpu_locality = dgx_gpus;
  const auto sets = so::plan_node(request);
  EXPECT_EQ(sets[0], so::CpuSet::parse("0-13,112-125"));
  EXPECT_EQ(so::optimizer_cpus(so::one_cpu_per_core(cores, sets[0]), 0.9), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(NodeShapes, ATopologyFileThatIsNotThereIsNamed) {
  try {
    so::Topology::from_xml("/nonexistent/node.xml");
    FAIL() << "loaded a missing file";
  } catch (const superoffload::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/node.xml"), std::string::npos) << e.what();
  }
}

}  // namespace
