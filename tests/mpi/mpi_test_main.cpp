// GoogleTest main for tests run under mpirun: MPI is up for every test, only rank 0
// prints, and every rank exits with the worst result so mpirun reports any failure.
#include <gtest/gtest.h>
#include <mpi.h>

#include <optional>

#include "base/logging.hpp"
#include "cluster/mpi_world.hpp"

namespace so = superoffload;

so::cluster::MpiWorld* g_world = nullptr;

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  so::log::init(so::log::Level::warning);
  std::optional<so::cluster::MpiWorld> world;
  world.emplace(&argc, &argv);
  g_world = &*world;
  so::log::set_rank(world->rank(), so::log::Console::rank0);
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int mine = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (worst != 0 && mine == 0 && world->rank() == 0) std::fprintf(stderr, "a test failed on another rank\n");
  world.reset();
  return worst;
}
