// Making, joining and removing a rank's resctrl groups.
#include "resctrl/partition.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.hpp"

namespace superoffload::resctrl {
namespace {

namespace fs = std::filesystem;

// The groups this process made and has not removed, as fixed buffers: the signal handler
// reads them without allocating.
constexpr int kMaxOwned = 8;
constexpr size_t kPathBytes = 1024;
char g_owned[kMaxOwned][kPathBytes];
volatile std::sig_atomic_t g_owned_count = 0;

void remember_owned(const std::string& dir) {
  for (int i = 0; i < g_owned_count; ++i) {
    if (g_owned[i][0] == '\0') {
      std::snprintf(g_owned[i], kPathBytes, "%s", dir.c_str());
      return;
    }
  }
  if (g_owned_count < kMaxOwned && dir.size() < kPathBytes) {
    std::snprintf(g_owned[g_owned_count], kPathBytes, "%s", dir.c_str());
    g_owned_count = g_owned_count + 1;
  }
}

void forget_owned(const std::string& dir) {
  for (int i = 0; i < g_owned_count; ++i) {
    if (dir == g_owned[i]) g_owned[i][0] = '\0';
  }
}

// SIGTERM and SIGINT (mpirun and srun end the other ranks of a failed job with them, Slurm's
// preemption and scancel too): the groups go first, then whatever handled the signal before.
struct sigaction g_previous_term {}, g_previous_int {};

extern "C" void remove_groups_on_signal(int signal) {
  const int saved_errno = errno;  // the interrupted code may be about to read it
  remove_own_groups_now();
  errno = saved_errno;
  const struct sigaction& previous = signal == SIGTERM ? g_previous_term : g_previous_int;
  if (previous.sa_handler == SIG_IGN) return;
  if (previous.sa_handler == SIG_DFL) {
    ::signal(signal, SIG_DFL);
    ::raise(signal);
    return;
  }
  if ((previous.sa_flags & SA_SIGINFO) == 0 && previous.sa_handler != nullptr) previous.sa_handler(signal);
}

void install_signal_cleanup() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  struct sigaction action {};
  action.sa_handler = remove_groups_on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &action, &g_previous_term);
  ::sigaction(SIGINT, &action, &g_previous_int);
  std::atexit([] { remove_own_groups_now(); });  // std::exit paths that skip destructors
}

// getdents64's record (the libc has no wrapper that is async-signal-safe).
struct Dirent64 {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

// rmdir, and where that finds files (a test's plain directory: the kernel's groups go with
// their files), the files first. Async-signal-safe: system calls only, on a stack buffer.
void remove_below(int parent, const char* name, int depth) noexcept {
  if (::unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno != ENOTEMPTY || depth == 0) return;
  const int fd = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) char buffer[4096];
  for (int pass = 0; pass < 4; ++pass) {  // entries removed while reading may hide others: read again
    ::lseek(fd, 0, SEEK_SET);
    for (long n; (n = ::syscall(SYS_getdents64, fd, buffer, sizeof buffer)) > 0;) {
      for (long at = 0; at < n;) {
        const auto* entry = reinterpret_cast<const Dirent64*>(buffer + at);
        at += entry->reclen;
        if (std::strcmp(entry->name, ".") == 0 || std::strcmp(entry->name, "..") == 0) continue;
        if (entry->type == DT_DIR) {
          remove_below(fd, entry->name, depth - 1);
        } else {
          ::unlinkat(fd, entry->name, 0);
        }
      }
    }
    if (::unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno != ENOTEMPTY) break;
  }
  ::close(fd);
}

void remove_group(const char* dir) noexcept { remove_below(AT_FDCWD, dir, 3); }

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// The threads of this process.
std::vector<pid_t> own_threads() {
  std::vector<pid_t> tids;
  std::error_code error;
  for (fs::directory_iterator it("/proc/self/task", error), end; !error && it != end; it.increment(error)) {
    tids.push_back(static_cast<pid_t>(std::stol(it->path().filename().string())));
  }
  return tids;
}

// Whether `pid` is a running superoffload process (its name, as the kernel keeps it).
bool superoffload_running(pid_t pid) {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) return false;
  const auto comm = read_text("/proc/" + std::to_string(pid) + "/comm");
  return comm.empty() || comm.rfind("superoffload", 0) == 0;  // unreadable: assume it runs
}

// Whether a tasks file lists a thread that still runs here (a thread of another pid namespace
// reads 0: counted as running).
bool lists_live_thread(const fs::path& tasks) {
  std::ifstream in(tasks);
  for (long tid = 0; in >> tid;) {
    // /proc/<tid> exists for every thread, listed or not.
    if (tid <= 0 || ::access(("/proc/" + std::to_string(tid)).c_str(), F_OK) == 0) return true;
  }
  return false;
}

// Writes each task id in its own write(2): the kernel moves one task per write.
void move_one_per_write(const std::string& root, const std::string& relative, const std::vector<pid_t>& tids) {
  const std::string path = root + "/" + relative;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    SO_FAIL("resctrl: cannot open " << path << ": " << std::strerror(errno)
                                    << hint("check that this user may write the group's tasks file (an administrator's "
                                            "prolog hands it to the job's user), or set [runtime] resctrl = \"off\""));
  }
  for (const pid_t tid : tids) {
    const std::string text = std::to_string(tid) + "\n";
    if (::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size())) continue;
    const int err = errno;
    if (err == ESRCH) continue;  // the thread ended meanwhile
    ::close(fd);
    const auto status = first_line(read_text(fs::path(root) / "info" / "last_cmd_status"));
    SO_FAIL("resctrl: " << path << " refused task " << tid << ": " << std::strerror(err)
                        << (status.empty() ? "" : " (info/last_cmd_status: " + status + ")")
                        << hint("a task can be moved by its owner or with CAP_SYS_NICE; set [runtime] resctrl = \"off\" "
                                "to train unpartitioned"));
  }
  ::close(fd);
}

}  // namespace

void write_control(const std::string& root, const std::string& relative, const std::string& text) {
  const std::string path = root + "/" + relative;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    SO_FAIL("resctrl: cannot open " << path << " for writing: " << std::strerror(errno)
                                    << hint("set [runtime] resctrl = \"off\" to train unpartitioned"));
  }
  const ssize_t written = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (written != static_cast<ssize_t>(text.size())) {
    const auto status = first_line(read_text(fs::path(root) / "info" / "last_cmd_status"));
    SO_FAIL("resctrl: " << path << " refused '" << first_line(text) << (text.find('\n') + 1 < text.size() ? " ..." : "")
                        << "': " << (written < 0 ? std::strerror(err) : "a short write")
                        << (status.empty() ? "" : " (info/last_cmd_status: " + status + ")")
                        << hint("check the [runtime] resctrl_* shares against the limits `superoffload version` shows"));
  }
}

std::string group_prefix(const std::string& job, pid_t pid) {
  return "superoffload." + (job.empty() ? std::string("nojob") : job) + "." + std::to_string(pid);
}

Partition Partition::create(const std::string& root, const std::string& prefix, GroupKind kind,
                            const GroupSchemata& schemata) {
  install_signal_cleanup();
  Partition p;
  p.root_ = root;
  p.owned_ = true;
  const std::string base = kind == GroupKind::control ? root : root + "/mon_groups";
  p.optimizer_ = base + "/" + prefix + ".optimizer";
  p.rest_ = base + "/" + prefix + ".rest";
  for (const auto* dir : {&p.optimizer_, &p.rest_}) {
    if (::mkdir(dir->c_str(), 0755) != 0) {
      const int err = errno;
      const auto status = first_line(read_text(fs::path(root) / "info" / "last_cmd_status"));
      p.remove();
      SO_FAIL("resctrl: cannot make the group " << *dir << ": " << std::strerror(err)
                                                << (status.empty() ? "" : " (info/last_cmd_status: " + status + ")")
                                                << hint(err == ENOSPC ? "no control group or monitoring id is free: "
                                                                        "remove unused groups, or set [runtime] resctrl "
                                                                        "= \"off\""
                                                                      : "set [runtime] resctrl = \"off\" to train "
                                                                        "unpartitioned"));
    }
    remember_owned(*dir);
  }
  if (kind == GroupKind::control) {
    try {
      const auto relative = [&](const std::string& dir) { return dir.substr(root.size() + 1); };
      write_control(root, relative(p.optimizer_) + "/schemata", schemata.optimizer);
      write_control(root, relative(p.rest_) + "/schemata", schemata.rest);
    } catch (...) {
      p.remove();
      throw;
    }
  }
  return p;
}

Partition Partition::adopt(const std::string& root, const std::string& optimizer_dir, const std::string& rest_dir) {
  Partition p;
  p.root_ = root;
  p.optimizer_ = optimizer_dir;
  p.rest_ = rest_dir;
  return p;
}

Partition::Partition(Partition&& other) noexcept { *this = std::move(other); }

Partition& Partition::operator=(Partition&& other) noexcept {
  if (this != &other) {
    remove();
    root_ = std::move(other.root_);
    optimizer_ = std::move(other.optimizer_);
    rest_ = std::move(other.rest_);
    owned_ = other.owned_;
    other.owned_ = false;
    other.optimizer_.clear();
    other.rest_.clear();
  }
  return *this;
}

Partition::~Partition() { remove(); }

void Partition::assign(const std::vector<pid_t>& optimizer_threads) const {
  std::vector<pid_t> rest;
  for (const pid_t tid : own_threads()) {
    if (std::find(optimizer_threads.begin(), optimizer_threads.end(), tid) == optimizer_threads.end()) rest.push_back(tid);
  }
  const auto relative = [&](const std::string& dir) { return dir.substr(root_.size() + 1); };
  move_one_per_write(root_, relative(rest_) + "/tasks", rest);
  move_one_per_write(root_, relative(optimizer_) + "/tasks", optimizer_threads);
}

void Partition::remove() noexcept {
  if (!owned_) return;
  for (const auto* dir : {&optimizer_, &rest_}) {
    if (dir->empty()) continue;
    remove_group(dir->c_str());
    forget_owned(*dir);
  }
  owned_ = false;
}

void remove_own_groups_now() noexcept {
  for (int i = 0; i < g_owned_count; ++i) {
    if (g_owned[i][0] != '\0') {
      remove_group(g_owned[i]);
      g_owned[i][0] = '\0';
    }
  }
}

std::vector<std::string> remove_stale_groups(const std::string& root) {
  std::vector<std::string> removed;
  for (const auto& base : {fs::path(root), fs::path(root) / "mon_groups"}) {
    std::error_code error;
    for (fs::directory_iterator it(base, error), end; !error && it != end; it.increment(error)) {
      const std::string name = it->path().filename().string();
      // superoffload.<job>.<pid>.<role>
      if (name.rfind("superoffload.", 0) != 0) continue;
      const auto last = name.rfind('.');
      const auto before = name.rfind('.', last - 1);
      if (last == std::string::npos || before == std::string::npos || before <= 12) continue;
      const std::string role = name.substr(last + 1), pid_text = name.substr(before + 1, last - before - 1);
      if ((role != "optimizer" && role != "rest") || pid_text.empty() ||
          pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) {
        continue;
      }
      if (superoffload_running(static_cast<pid_t>(std::stol(pid_text)))) continue;
      if (lists_live_thread(it->path() / "tasks")) continue;  // threads still in it: not ours to judge
      remove_group(it->path().c_str());
      std::error_code remove_error;
      if (!fs::exists(it->path(), remove_error)) removed.push_back(it->path().string());
    }
  }
  return removed;
}

}  // namespace superoffload::resctrl
