// RunDirectory.
#include "train/run_directory.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "base/check_sys.hpp"
#include "base/error.hpp"
#include "base/logging.hpp"
#include "cluster/job_exit.hpp"
#include "cluster/mpi_world.hpp"

namespace superoffload::train {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Field 22 of /proc/PID/stat: the process's start time in clock ticks since boot; with the
// boot id it tells a live holder from a later process that reuses its pid. -1 when there is
// no such process, or only its zombie (killed, not yet reaped by its launcher).
long long start_ticks(long long pid) {
  const auto stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto end_of_name = stat.rfind(')');
  if (end_of_name == std::string::npos) return -1;
  std::istringstream fields(stat.substr(end_of_name + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 3 && (field == "Z" || field == "X")) return -1;
    if (i == 22) return std::atoll(field.c_str());
  }
  return -1;
}

std::string boot_id() {
  auto id = read_text("/proc/sys/kernel/random/boot_id");
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

std::string slurm_job_id() {
  const char* id = std::getenv("SLURM_JOB_ID");
  return id ? id : "";
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return text;
}

// Every rank writes, flushes and removes a file of its own: a read-only or full file system,
// or a directory this user may not write, is found before any work is done.
void check_writable(const fs::path& directory, const cluster::MpiWorld& world) {
  const auto where = directory.string() + " on " + world.host() + " (rank " + std::to_string(world.rank()) + ")";
  const char* what_to_do = "set [training] output_dir to a writable directory: it receives the logs, metrics.h5 and "
                           "the checkpoints";
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) throw Error("[training] output_dir " + where + " cannot be created: " + error.message(), what_to_do, Error::UserInput{});
  const auto probe = directory / (".write-test." + world.host() + "." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int failure = fd < 0 ? errno : 0;
  if (fd >= 0) {
    if (::write(fd, "x", 1) != 1 || ::fsync(fd) != 0) failure = errno;
    if (::close(fd) != 0 && failure == 0) failure = errno;
    ::unlink(probe.c_str());
  }
  if (failure != 0) {
    throw Error("[training] output_dir " + where + " is not writable: " + std::strerror(failure), what_to_do,
                Error::UserInput{});
  }
}

// Why the job named in `holder` is certainly gone; empty when it may still run.
std::string gone_because(const nlohmann::json& holder, const cluster::MpiWorld& world) {
  const auto job = holder.value("slurm_job_id", std::string());
  if (!job.empty() && job == slurm_job_id()) return "it was an earlier run of this Slurm job (" + job + "), requeued";
  if (holder.value("host", std::string()) != world.host()) return "";
  if (holder.value("boot_id", std::string()) != boot_id()) return "its host has rebooted since";
  const auto pid = holder.value("pid", 0LL);
  if (pid <= 0) return "it names no process";
  const auto ticks = start_ticks(pid);
  if (ticks < 0) return "its process " + std::to_string(pid) + " has ended";
  if (ticks != holder.value("start_ticks", -1LL)) return "its process " + std::to_string(pid) + " has ended (the pid is reused)";
  return "";
}

std::string describe_holder(const nlohmann::json& holder) {
  std::ostringstream text;
  text << "host " << holder.value("host", std::string("?")) << ", pid " << holder.value("pid", 0LL);
  const auto job = holder.value("slurm_job_id", std::string());
  if (!job.empty()) text << ", Slurm job " << job;
  text << ", since " << holder.value("started", std::string("?"));
  return text.str();
}

// Writes `text` to `path` (created exclusively, or replacing it atomically when `replace`).
// Returns false when `path` exists and `replace` is not set.
bool write_lock(const fs::path& path, const std::string& text, bool replace) {
  const auto temporary = replace ? fs::path(path.string() + ".new." + std::to_string(::getpid())) : path;
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST && !replace) return false;
  SO_CHECK_SYS(fd, "creating the lock file " << temporary.string());
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!written) {
    ::unlink(temporary.c_str());
    errno = saved;
    SO_CHECK_SYS(-1, "writing the lock file " << temporary.string());
  }
  if (replace) SO_CHECK_SYS(::rename(temporary.c_str(), path.c_str()), "replacing the lock file " << path.string());
  return true;
}

std::string take_lock(const fs::path& lock, const cluster::MpiWorld& world) {
  const nlohmann::json mine = {{"host", world.host()},      {"pid", static_cast<long long>(::getpid())},
                               {"start_ticks", start_ticks(::getpid())}, {"boot_id", boot_id()},
                               {"slurm_job_id", slurm_job_id()},        {"started", now_text()},
                               {"world_size", world.size()}};
  const auto text = mine.dump() + "\n";
  if (write_lock(lock, text, false)) return text;
  // Held. A holder that is creating the file right now may not have written it yet: give it a
  // moment before reading an empty or partial file as abandoned.
  nlohmann::json holder;
  for (int attempt = 0; attempt < 10; ++attempt) {
    holder = nlohmann::json::parse(read_text(lock), nullptr, false);
    if (holder.is_object()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string reason = holder.is_object() ? gone_because(holder, world) : "its lock file is empty or unreadable";
  // A holder killed a moment ago may still be on its way out: look again for up to 2 s.
  for (int attempt = 0; attempt < 8 && reason.empty() && holder.value("host", std::string()) == world.host(); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    reason = gone_because(holder, world);
  }
  if (reason.empty()) {
    throw Error("[training] output_dir " + lock.parent_path().string() + " is in use by another job (" +
                    describe_holder(holder) + "): two jobs on one directory overwrite each other's checkpoints "
                    "and metrics",
                "give this job its own [training] output_dir, or wait for the other to end; if that job is "
                "certainly gone (its node failed), delete " + lock.string(),
                Error::UserInput{});
  }
  SO_LOG(warning) << "taking over " << lock.string() << " from a job that is gone (" << reason
                  << (holder.is_object() ? "; it was " + describe_holder(holder) : std::string()) << ")";
  write_lock(lock, text, true);
  return text;
}

}  // namespace

RunDirectory::RunDirectory(const fs::path& path, const cluster::MpiWorld& world) : lock_path_(path / kLockName) {
  std::exception_ptr error;
  try {
    check_writable(path, world);
  } catch (...) {
    error = std::current_exception();
  }
  cluster::exit_if_any_rank_failed(world, error);
  if (world.rank() == 0) {
    try {
      lock_text_ = take_lock(lock_path_, world);
    } catch (...) {
      error = std::current_exception();
    }
  }
  cluster::exit_if_any_rank_failed(world, error);
}

RunDirectory::~RunDirectory() {
  // Only our own: a lock taken over while this job was suspended belongs to the new holder.
  if (!lock_text_.empty() && read_text(lock_path_) == lock_text_) ::unlink(lock_path_.c_str());
}

}  // namespace superoffload::train
