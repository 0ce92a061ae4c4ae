// MPI start-up and node discovery.
#include "cluster/mpi_world.hpp"

#include <algorithm>

#include <atomic>
#include <cstdlib>

#include "cluster/check_mpi.hpp"

namespace superoffload::cluster {
namespace {
std::atomic<MpiWorld*> g_current{nullptr};
}

MpiWorld::MpiWorld(int* argc, char*** argv) {
  int already = 0;
  SO_CHECK_MPI(MPI_Initialized(&already));
  SO_CHECK(!already, "MPI was initialised twice in one process" << hint("this is a bug; please report it"));
  // Started without a launcher (`superoffload plan` on a login node, one-rank runs), Open MPI
  // forks a daemon that would only serve MPI_Comm_spawn, which superoffload never calls: ~0.13 s
  // of each such start. Under mpirun or srun this component is not used; a user's setting wins.
  setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
  SO_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_));
  // Errors come back as codes so that SO_CHECK_MPI can report them with context.
  SO_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  SO_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  SO_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));

  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int name_length = 0;
  SO_CHECK_MPI(MPI_Get_processor_name(name, &name_length));
  host_.assign(name, static_cast<size_t>(name_length));

  SO_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm_));
  SO_CHECK_MPI(MPI_Comm_set_errhandler(node_comm_, MPI_ERRORS_RETURN));
  SO_CHECK_MPI(MPI_Comm_rank(node_comm_, &local_rank_));
  SO_CHECK_MPI(MPI_Comm_size(node_comm_, &local_size_));

  // Node index: rank of the node's leader among all leaders, shared within the node.
  MPI_Comm leaders = MPI_COMM_NULL;
  SO_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, local_rank_ == 0 ? 0 : MPI_UNDEFINED, rank_, &leaders));
  int index_and_count[2] = {0, 0};
  if (leaders != MPI_COMM_NULL) {
    SO_CHECK_MPI(MPI_Comm_rank(leaders, &index_and_count[0]));
    SO_CHECK_MPI(MPI_Comm_size(leaders, &index_and_count[1]));
    SO_CHECK_MPI(MPI_Comm_free(&leaders));
  }
  SO_CHECK_MPI(MPI_Bcast(index_and_count, 2, MPI_INT, 0, node_comm_));
  node_index_ = index_and_count[0];
  node_count_ = index_and_count[1];
  g_current = this;
}

MpiWorld::~MpiWorld() {
  g_current = nullptr;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
  MPI_Finalize();
}

MpiWorld* MpiWorld::current() { return g_current.load(); }

std::vector<std::string> MpiWorld::allgather(const std::string& mine, MPI_Comm comm) {
  int size = 0;
  SO_CHECK_MPI(MPI_Comm_size(comm, &size));
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<size_t>(size));
  SO_CHECK_MPI(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm));
  std::vector<int> offsets(static_cast<size_t>(size), 0);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<size_t>(r)] = total;
    total += lengths[static_cast<size_t>(r)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  SO_CHECK_MPI(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                              MPI_CHAR, comm));
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                             static_cast<size_t>(lengths[static_cast<size_t>(r)])));
  }
  return out;
}

std::vector<std::string> MpiWorld::allgather_lines(const std::string& mine, MPI_Comm comm) {
  std::vector<std::string> lines;
  for (const auto& text : allgather(mine, comm)) {
    for (size_t begin = 0; begin < text.size();) {
      const auto end = std::min(text.find('\n', begin), text.size());
      lines.push_back(text.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  return lines;
}

bool MpiWorld::all_true(bool mine, MPI_Comm comm) {
  int value = mine ? 1 : 0, all = 0;
  SO_CHECK_MPI(MPI_Allreduce(&value, &all, 1, MPI_INT, MPI_LAND, comm));
  return all != 0;
}

}  // namespace superoffload::cluster
