// The MPI world of this process: world and node-local ranks (from MPI_COMM_TYPE_SHARED,
// not from launcher environment variables), the node's index, and small collectives over
// strings used at start-up.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace superoffload::cluster {

class MpiWorld {
 public:
  // Initialises MPI (MPI_THREAD_MULTIPLE requested; the communication threads of later
  // parts need it) and splits the node-local communicator.
  MpiWorld(int* argc, char*** argv);
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_index() const { return node_index_; }
  int node_count() const { return node_count_; }
  const std::string& host() const { return host_; }
  int thread_level() const { return thread_level_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }
  MPI_Comm node() const { return node_comm_; }

  // Every rank's string, in rank order of `comm`.
  static std::vector<std::string> allgather(const std::string& mine, MPI_Comm comm);
  // Every rank's text split into its lines, in rank order (an empty text adds none): reports
  // of which some ranks give one line, some several, some none.
  static std::vector<std::string> allgather_lines(const std::string& mine, MPI_Comm comm);
  // Logical AND over `comm`.
  static bool all_true(bool mine, MPI_Comm comm);

  // The process's world, for the fatal-error path (null before construction/after destruction).
  static MpiWorld* current();

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  int node_index_ = 0, node_count_ = 1, thread_level_ = 0;
  std::string host_;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
};

}  // namespace superoffload::cluster
