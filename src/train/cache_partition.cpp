// Setting up the run's resctrl groups across the ranks of each node.
#include "train/cache_partition.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "cluster/check_mpi.hpp"
#include "cluster/job_exit.hpp"
#include "cluster/mpi_world.hpp"
#include "resctrl/decision.hpp"

namespace superoffload::train {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Rank `root` of `comm` sends a string to the others.
std::string broadcast(std::string text, int root, MPI_Comm comm) {
  int size = static_cast<int>(text.size());
  SO_CHECK_MPI(MPI_Bcast(&size, 1, MPI_INT, root, comm));
  text.resize(static_cast<size_t>(size));
  if (size > 0) SO_CHECK_MPI(MPI_Bcast(text.data(), size, MPI_CHAR, root, comm));
  return text;
}

}  // namespace

resctrl::Decision decide_resctrl(const resctrl::Resctrl& tree, const config::RuntimeConfig& runtime, int ranks_on_node,
                                 const std::vector<int>& cache_ids, bool optimizer_threads) {
  const auto mode = runtime.resctrl == config::ResctrlMode::off        ? resctrl::Mode::off
                    : runtime.resctrl == config::ResctrlMode::required ? resctrl::Mode::required
                                                                       : resctrl::Mode::automatic;
  const char* job = std::getenv("SLURM_JOB_ID");
  return resctrl::decide(tree, mode,
                         {.optimizer_cache = runtime.resctrl_optimizer_cache,
                          .optimizer_bandwidth = runtime.resctrl_optimizer_bandwidth},
                         job ? job : "", ranks_on_node, cache_ids, optimizer_threads);
}

std::string resctrl_mount_table() {
  const char* table = std::getenv("SUPEROFFLOAD_RESCTRL_MOUNTS");
  return table && *table ? table : "/proc/self/mounts";
}

CachePartition::CachePartition(const config::RuntimeConfig& runtime, const cluster::MpiWorld& world,
                               const std::vector<int>& cpus, const std::vector<pid_t>& optimizer_threads) {
  const bool off = runtime.resctrl == config::ResctrlMode::off;
  const bool required = runtime.resctrl == config::ResctrlMode::required;
  const char* job_id = std::getenv("SLURM_JOB_ID");
  const std::string job = job_id ? job_id : "";
  cluster::add_abort_cleanup(resctrl::remove_own_groups_now);

  // The node's first rank removes what killed runs left behind before anyone counts free groups.
  auto tree = off ? resctrl::Resctrl{} : resctrl::detect(resctrl_mount_table());
  std::string node_line;
  if (world.local_rank() == 0 && tree.mounted() && tree.writable) {
    const auto stale = resctrl::remove_stale_groups(tree.mount);
    if (!stale.empty()) node_line += "removed " + std::to_string(stale.size()) + " stale group(s) of ended runs; ";
  }
  SO_CHECK_MPI(MPI_Barrier(world.node()));
  if (tree.mounted()) tree = resctrl::read_tree(tree.mount);
  auto decision = decide_resctrl(tree, runtime, world.local_size(), resctrl::cache_ids_of_cpus(cpus),
                                 !optimizer_threads.empty());
  // The node's ranks act alike (the node's groups are made by one and joined by the others): a
  // rank that read the tree differently (another job made groups meanwhile) follows the first.
  int action = static_cast<int>(decision.action);
  SO_CHECK_MPI(MPI_Bcast(&action, 1, MPI_INT, 0, world.node()));
  if (action != static_cast<int>(decision.action)) {
    decision.action = static_cast<resctrl::Action>(action);
    const bool needs_schemata = decision.action == resctrl::Action::per_rank || decision.action == resctrl::Action::per_node;
    if (decision.action == resctrl::Action::adopt || (needs_schemata && decision.schemata.optimizer.empty())) {
      decision.action = resctrl::Action::none;  // what the first rank found is not there for this one
    }
    decision.why = "as the node's first rank decided (this rank found: " + decision.why + ")";
  }
  node_line += resctrl::describe(decision);
  // Every rank of the node has counted the free groups before any makes its own.
  SO_CHECK_MPI(MPI_Barrier(world.node()));

  // Make or join the groups; an error is this rank's, and with "auto" only a warning.
  std::string failure;
  try {
    using resctrl::Action;
    const auto prefix = resctrl::group_prefix(job, ::getpid());
    if (decision.action == Action::per_rank) {
      partition_ = resctrl::Partition::create(tree.mount, prefix, resctrl::GroupKind::control, decision.schemata);
    } else if (decision.action == Action::monitor) {
      partition_ = resctrl::Partition::create(tree.mount, prefix, resctrl::GroupKind::monitor, decision.schemata);
    } else if (decision.action == Action::adopt) {
      partition_ = resctrl::Partition::adopt(tree.mount, decision.optimizer_dir, decision.rest_dir);
    } else if (action == static_cast<int>(Action::per_node)) {  // every rank of the node takes part
      // The node's first rank makes them; the others learn their names, or its error.
      std::string made;
      if (world.local_rank() == 0) {
        try {
          partition_ = resctrl::Partition::create(tree.mount, prefix, resctrl::GroupKind::control, decision.schemata);
          made = partition_->optimizer_dir() + "\n" + partition_->rest_dir();
        } catch (const Error& e) {
          failure = e.describe();
        }
      }
      made = broadcast(made, 0, world.node());
      if (world.local_rank() != 0 && !made.empty() && decision.action == Action::per_node) {
        partition_ = resctrl::Partition::adopt(tree.mount, made.substr(0, made.find('\n')), made.substr(made.find('\n') + 1));
      } else if (world.local_rank() != 0 && decision.action == Action::per_node) {
        failure = "the node's first rank could not make the node's groups";
      }
    }
    if (partition_) partition_->assign(optimizer_threads);
  } catch (const Error& e) {
    failure = e.describe();
    partition_.reset();
  }
  const bool partitioned = partition_.has_value() && decision.partitions();
  std::exception_ptr error;
  if (required && !partitioned) {
    try {
      SO_FAIL("[runtime] resctrl = \"required\", but rank " << world.rank() << " on " << world.host()
                                                            << " cannot partition: "
                                                            << (failure.empty() ? decision.why : failure)
                                                            << hint("set [runtime] resctrl = \"auto\" to train "
                                                                    "unpartitioned where it cannot be done"));
    } catch (...) {
      error = std::current_exception();
    }
  }
  cluster::exit_if_any_rank_failed(world, error);

  // The meters: each rank its own groups; groups a node shares, its first rank.
  const bool shared = decision.action == resctrl::Action::per_node || decision.action == resctrl::Action::adopt;
  const bool meters = partition_ && tree.monitoring && (!shared || world.local_rank() == 0);
  if (meters) {
    optimizer_meter_ = resctrl::BandwidthMeter(partition_->optimizer_dir(), now_s());
    rest_meter_ = resctrl::BandwidthMeter(partition_->rest_dir(), now_s());
  }
  // The cap this run wrote (an administrator's groups keep theirs, which the step line does not show).
  if ((decision.action == resctrl::Action::per_rank || decision.action == resctrl::Action::per_node) &&
      !tree.bandwidth.empty()) {
    cap_percent_ = static_cast<int>(std::lround(100.0 * runtime.resctrl_optimizer_bandwidth));
  }
  // Rank 0 gets one line per node, and a line for each rank whose groups failed.
  // Where resctrl is not mounted, the start-up line that describes the node's tree says it all.
  const bool say = world.local_rank() == 0 && (tree.mounted() || off);
  std::string mine;
  if (say) {
    mine = "node " + std::to_string(world.node_index()) + " (" + world.host() + "): resctrl " + node_line +
           (meters ? "; counters recorded per step" : "");
  }
  if (!failure.empty()) {
    mine += (mine.empty() ? "" : "\n") + std::string("rank ") + std::to_string(world.rank()) +
            ": resctrl failed, training unpartitioned: " + failure;
  }
  lines_ = cluster::MpiWorld::allgather_lines(mine, world.world());
}

CachePartition::Sample CachePartition::sample() {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  if (!optimizer_meter_.active()) return {kNaN, kNaN, kNaN, kNaN};
  const double now = now_s();
  const auto optimizer = optimizer_meter_.sample(now);
  const auto rest = rest_meter_.sample(now);
  return {optimizer.gb_per_s, rest.gb_per_s, optimizer.occupancy_bytes, rest.occupancy_bytes};
}

}  // namespace superoffload::train
