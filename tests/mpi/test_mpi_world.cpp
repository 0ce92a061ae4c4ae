// Under mpirun: node-local ranks come from MPI_COMM_TYPE_SHARED, every rank is bound to
// its own cores (shared evenly only when there are more ranks than cores), LibTorch's
// thread count follows the binding, and start-up errors are agreed on by all ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>

#include "cluster/binding.hpp"
#include "cluster/check_mpi.hpp"
#include "cluster/compute_threads.hpp"
#include "cluster/cpu_set.hpp"
#include "cluster/mpi_world.hpp"
#include "cluster/topology.hpp"

namespace so = superoffload::cluster;
extern so::MpiWorld* g_world;

namespace {

TEST(MpiWorld, NodeLocalRanksOnOneNode) {
  const auto& w = *g_world;
  // All ranks of this test run on one machine.
  EXPECT_EQ(w.local_rank(), w.rank());
  EXPECT_EQ(w.local_size(), w.size());
  EXPECT_EQ(w.node_count(), 1);
  EXPECT_EQ(w.node_index(), 0);
  int node_size = 0;
  MPI_Comm_size(w.node(), &node_size);
  EXPECT_EQ(node_size, w.size());
  EXPECT_GE(w.thread_level(), MPI_THREAD_FUNNELED);
}

TEST(MpiWorld, AllgatherCollectsEveryRanksString) {
  const auto& w = *g_world;
  const auto all = so::MpiWorld::allgather(std::string(static_cast<size_t>(w.rank()), 'x') + "r" +
                                               std::to_string(w.rank()),
                                           w.world());
  ASSERT_EQ(all.size(), static_cast<size_t>(w.size()));
  for (int r = 0; r < w.size(); ++r) {
    EXPECT_EQ(all[static_cast<size_t>(r)], std::string(static_cast<size_t>(r), 'x') + "r" + std::to_string(r));
  }
}

TEST(Binding, RanksGetDisjointCoresOrAnEvenShare) {
  const auto& w = *g_world;
  const auto binding = so::bind_ranks(w, so::BindMode::automatic);
  ASSERT_FALSE(binding.cpus.empty());
  const auto topology = so::Topology::this_machine();
  const auto cores = topology.allowed_cores();
  EXPECT_EQ(topology.current_binding(), binding.cpus) << "the process runs where the table says";
  EXPECT_EQ(so::compute_threads(), binding.threads);
  EXPECT_EQ(binding.threads, std::max(1, so::cores_in(cores, binding.cpus)));

  const auto all = so::MpiWorld::allgather(binding.cpus.to_string(), w.world());
  std::vector<so::CpuSet> sets;
  for (const auto& text : all) sets.push_back(so::CpuSet::parse(text));
  if (static_cast<size_t>(w.local_size()) <= cores.size()) {
    for (size_t a = 0; a < sets.size(); ++a) {
      for (size_t b = a + 1; b < sets.size(); ++b) {
        EXPECT_FALSE(sets[a].intersects(sets[b])) << "ranks " << a << " and " << b << ": " << sets[a].to_string()
                                                  << " / " << sets[b].to_string();
      }
    }
  } else {
    // More ranks than cores: one core each, spread evenly.
    std::map<int, int> ranks_per_core;
    for (const auto& set : sets) {
      EXPECT_EQ(so::cores_in(cores, set), 1);
      ++ranks_per_core[set.cpus().front()];
    }
    int lo = w.size(), hi = 0;
    for (const auto& [cpu, n] : ranks_per_core) {
      lo = std::min(lo, n);
      hi = std::max(hi, n);
    }
    EXPECT_EQ(static_cast<size_t>(ranks_per_core.size()), cores.size());
    EXPECT_LE(hi - lo, 1);
  }

  const auto report = so::report_bindings(w, binding, 0.8);
  EXPECT_EQ(report.table.size(), static_cast<size_t>(w.size()) + 1);
  if (static_cast<size_t>(w.local_size()) > cores.size()) {
    EXPECT_FALSE(report.warnings.empty()) << "shared cores are reported";
  }
}

TEST(MpiWorld, MpiErrorsAreDecodedWithAHint) {
  try {
    SO_CHECK_MPI(MPI_Bcast(nullptr, -1, MPI_INT, 0, g_world->world()));
    FAIL() << "a negative count must fail";
  } catch (const superoffload::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("MPI call MPI_Bcast"), std::string::npos) << what;
    EXPECT_NE(what.find("(code "), std::string::npos) << what;
    EXPECT_NE(e.hint().find("logs/rank_"), std::string::npos);
  }
}

TEST(Binding, AllTrueIsALogicalAnd) {
  const auto& w = *g_world;
  EXPECT_TRUE(so::MpiWorld::all_true(true, w.world()));
  EXPECT_FALSE(so::MpiWorld::all_true(w.rank() != w.size() - 1, w.world()));
}

}  // namespace
