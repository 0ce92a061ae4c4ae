// A rank's two resctrl groups, the CPU optimizer's threads in one and every other thread of the
// process in the other, and their removal on every way out.
//
// Groups are directories: control groups at the resctrl root (with schemata), or monitoring
// groups under <root>/mon_groups (counters only, where no control group can be had). Groups
// this process made are named "superoffload.<job>.<pid>.optimizer" and "....rest" (job: Slurm's
// job id, or "nojob"), so that an epilog can remove a job's groups and a later run can tell
// that the process that made them is gone. They are removed by the destructor, by
// remove_own_groups_now() (async-signal-safe: the SIGTERM handler and a failing rank's abort
// call it) and, failing all of that (SIGKILL), by remove_stale_groups at the next start on the
// node. Groups someone else made (an administrator's Slurm prolog, another rank of the node)
// are adopted: threads are moved into them, nothing else is changed.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "resctrl/schemata.hpp"

namespace superoffload::resctrl {

enum class GroupKind { control, monitor };

class Partition {
 public:
  // Makes <root>/<prefix>.optimizer and <prefix>.rest (control: with `schemata` written;
  // monitor: under mon_groups). Throws superoffload::Error naming the file and, for a write the
  // kernel refused, its info/last_cmd_status; whatever was made is removed again first.
  static Partition create(const std::string& root, const std::string& prefix, GroupKind kind,
                          const GroupSchemata& schemata);
  // Groups made by someone else, used as they are and never removed by this process.
  static Partition adopt(const std::string& root, const std::string& optimizer_dir, const std::string& rest_dir);

  Partition(Partition&& other) noexcept;
  Partition& operator=(Partition&& other) noexcept;
  Partition(const Partition&) = delete;
  Partition& operator=(const Partition&) = delete;
  ~Partition();

  // Moves `optimizer_threads` into the optimizer's group and every other thread of this process
  // (/proc/self/task) into the rest's, one task id per write; threads made later inherit their
  // creator's group. A thread that ended meanwhile is skipped. Throws like create.
  void assign(const std::vector<pid_t>& optimizer_threads) const;
  // Removes the groups this object made (their threads return to the default group).
  void remove() noexcept;

  const std::string& optimizer_dir() const { return optimizer_; }
  const std::string& rest_dir() const { return rest_; }
  bool owned() const { return owned_; }

 private:
  Partition() = default;
  std::string root_, optimizer_, rest_;
  bool owned_ = false;
};

// "superoffload.<job>.<pid>": the prefix of the groups a process makes.
std::string group_prefix(const std::string& job, pid_t pid);

// Async-signal-safe: rmdir of every group this process made and has not removed yet.
void remove_own_groups_now() noexcept;

// Removes the groups of earlier runs on this node whose process is gone: named
// superoffload.<job>.<pid>.* (at the root or under mon_groups), <pid> not a running
// superoffload process here, and no thread listed in their tasks. Returns the removed
// directories. Groups of other names (an administrator's) are never touched.
std::vector<std::string> remove_stale_groups(const std::string& root);

// Writes `text` to <root>/<relative> in one write(2), which the kernel parses as one command.
// Throws superoffload::Error naming the file, with the kernel's reason from
// info/last_cmd_status when the write is refused.
void write_control(const std::string& root, const std::string& relative, const std::string& text);

}  // namespace superoffload::resctrl
