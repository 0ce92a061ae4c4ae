// A file descriptor owned by its scope: opened checked (the error names the file), closed by
// the destructor, or by close() where the result matters.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "base/check_sys.hpp"

namespace superoffload::io {

class Descriptor {
 public:
  Descriptor(const std::filesystem::path& path, int flags) : path_(path), fd_(::open(path.c_str(), flags | O_CLOEXEC)) {
    SO_CHECK_SYS(fd_, "opening " << path.string());
  }
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }
  // Closes now and checks the result (NFS and some quotas report write errors only here).
  void close() {
    const int fd = fd_;
    fd_ = -1;
    SO_CHECK_SYS(::close(fd), "closing " << path_.string());
  }

 private:
  std::filesystem::path path_;
  int fd_;
};

}  // namespace superoffload::io
