// A run's output directory (logs, metrics.h5, checkpoints): created, proven writable on every
// rank before anything is written, and held by one job at a time.
//
// The lock is a file, <output_dir>/.superoffload.lock, created with O_EXCL and naming its
// holder (host, pid, process start time, boot id, Slurm job id). flock() is not used: Lustre
// and NFS mounts often do not honour it across nodes. A lock whose holder is provably gone is
// taken over: the same host with that process no longer running (or rebooted since), or the
// same Slurm job id (a requeued job: Slurm ended the previous incarnation first). Anything
// else is refused naming the holder, with the lock file to delete if the user knows better.
#pragma once

#include <filesystem>
#include <string>

namespace superoffload::cluster {
class MpiWorld;
}

namespace superoffload::train {

class RunDirectory {
 public:
  // Collective. Ends the job (exit 1, the failing rank's message) when the directory cannot be
  // created or written on some rank, or another job holds it.
  RunDirectory(const std::filesystem::path& path, const cluster::MpiWorld& world);
  ~RunDirectory();  // rank 0 removes the lock file if it is still its own
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  static constexpr const char* kLockName = ".superoffload.lock";

 private:
  std::filesystem::path lock_path_;
  std::string lock_text_;  // what this job wrote; empty on other ranks
};

}  // namespace superoffload::train
