// Fatal-error handling across ranks.
#include "cluster/job_exit.hpp"

#include <mpi.h>

#include <cstdlib>
#include <iostream>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "cluster/mpi_world.hpp"

namespace superoffload::cluster {

std::string describe_exception(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.describe();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

namespace {
void (*g_abort_cleanups[8])() noexcept = {};
}  // namespace

void add_abort_cleanup(void (*cleanup)() noexcept) {
  for (auto& slot : g_abort_cleanups) {
    if (slot == cleanup) return;
    if (slot == nullptr) {
      slot = cleanup;
      return;
    }
  }
}

void abort_job(const std::string& message, int exit_code) {
  for (auto* cleanup : g_abort_cleanups) {
    if (cleanup != nullptr) cleanup();
  }
  const MpiWorld* world = MpiWorld::current();
  const int rank = world ? world->rank() : 0;
  SO_LOG(fatal) << message;
  log::flush();
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized && world && world->size() > 1) {
    std::cerr << "superoffload: rank " << rank << " failed; ending all " << world->size() << " ranks\n";
    std::cerr.flush();
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  }
  if (initialized && !finalized) MPI_Finalize();
  std::exit(exit_code);
}

void exit_if_any_rank_failed(const MpiWorld& world, const std::exception_ptr& mine, int exit_code) {
  // Lowest failing rank, or size when none failed.
  int candidate = mine ? world.rank() : world.size();
  int first = world.size();
  if (MPI_Allreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, world.world()) != MPI_SUCCESS) {
    abort_job(mine ? describe_exception(mine) : "MPI_Allreduce failed while agreeing on a start-up error", exit_code);
  }
  if (first == world.size()) return;
  if (world.rank() == first) {
    SO_LOG(error) << describe_exception(mine);
    log::flush();
  }
  MPI_Finalize();
  std::exit(exit_code);
}

}  // namespace superoffload::cluster
