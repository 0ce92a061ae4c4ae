// Test helper: the last rank fails while the others wait in a barrier that can never
// complete. superoffload's fatal path must end the whole job with the failing rank's
// message instead of hanging (checked by tests/cli/test_abort.sh).
#include <mpi.h>

#include <optional>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "cluster/job_exit.hpp"
#include "cluster/mpi_world.hpp"

namespace so = superoffload;

int main(int argc, char** argv) {
  so::log::init(so::log::Level::info);
  std::optional<so::cluster::MpiWorld> world;
  world.emplace(&argc, &argv);
  so::log::set_rank(world->rank(), so::log::Console::rank0);
  try {
    if (world->rank() == world->size() - 1) {
      SO_FAIL("injected failure while loading layer 3 on rank " << world->rank()
              << so::hint("this failure is on purpose (abort test)"));
    }
    MPI_Barrier(MPI_COMM_WORLD);  // never completes: the last rank does not arrive
  } catch (...) {
    so::cluster::abort_job(so::cluster::describe_exception(std::current_exception()));
  }
  world.reset();
  return 0;
}
