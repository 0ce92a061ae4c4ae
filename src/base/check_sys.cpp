// errno decoding with hints for the failures people hit on clusters.
#include "base/check_sys.hpp"

#include <cerrno>
#include <cstring>

namespace superoffload::detail {

std::string describe_errno(int err, std::string* hint) {
  std::string out = std::strerror(err);
  out += " (errno " + std::to_string(err) + ")";
  if (hint) {
    switch (err) {
      case ENOENT: *hint = "check the path; relative paths are taken from the job's working directory"; break;
      case EACCES:
      case EPERM: *hint = "check permissions of the file and its directory"; break;
      case ENOSPC:
      case EDQUOT: *hint = "the file system is full or over quota; free space or change output_dir"; break;
      case ENOMEM: *hint = "the node is out of memory; use more nodes or a smaller micro-batch"; break;
      case EMFILE: *hint = "too many open files; raise `ulimit -n`"; break;
      case EINVAL: *hint = "an argument was rejected by the system; this is likely a bug, please report it"; break;
      default: hint->clear();
    }
  }
  return out;
}

}  // namespace superoffload::detail
