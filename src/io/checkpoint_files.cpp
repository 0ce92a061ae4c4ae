// Checkpoint layout, integrity checks and the choice of the checkpoint to resume from.
#include "io/checkpoint_files.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/check_sys.hpp"
#include "base/error.hpp"
#include "cluster/check_mpi.hpp"
#include "io/crc32c.hpp"

namespace superoffload::io {

namespace fs = std::filesystem;

std::string step_directory_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

std::string rank_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d.h5", rank);
  return name;
}

std::optional<int64_t> step_of(const fs::path& directory) {
  const auto name = directory.filename().string();
  if (name.size() <= 5 || name.rfind("step_", 0) != 0) return std::nullopt;
  if (!std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return std::stoll(name.substr(5));
}

uint32_t file_crc32(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  SO_CHECK(in, "cannot read " << path.string());
  std::vector<char> buffer(1 << 22);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.gcount() > 0) crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(in.gcount()));
  }
  return static_cast<uint32_t>(crc);
}

void sync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | (fs::is_directory(path) ? O_DIRECTORY : 0));
  SO_CHECK_SYS(fd, "opening " << path.string() << " to sync it");
  const int rc = ::fsync(fd);
  ::close(fd);
  SO_CHECK_SYS(rc, "fsync of " << path.string());
}

void write_file_atomically(const fs::path& path, const std::string& text) {
  const fs::path temporary = path.string() + ".tmp";
  // POSIX calls, each checked: a full disk shows in write(), fsync() or close() (NFS), and the
  // message says which and why. A temporary left by a failure is removed.
  auto fail = [&](const char* what) {
    const int error = errno;
    std::error_code ignored;
    fs::remove(temporary, ignored);
    SO_FAIL("cannot write " << temporary.string() << ": " << what << " failed: " << std::strerror(error)
                            << hint("check free space, quotas and permissions of " + temporary.parent_path().string()));
  };
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("open");
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      const int error = errno;
      ::close(fd);
      errno = error;
      fail("write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    errno = error;
    fail("fsync");
  }
  if (::close(fd) != 0) fail("close");
  fs::rename(temporary, path);
  sync_path(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

std::vector<fs::path> list_checkpoints(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root, error)) {
    if (!entry.is_directory()) continue;
    if (const auto step = step_of(entry.path())) found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

namespace {

// The step directory a pointer file beside them names.
fs::path read_pointer(const fs::path& root, const char* pointer) {
  std::ifstream in(root / pointer);
  std::string name;
  if (!(in >> name)) return {};
  // Only a step directory beside it: never an absolute path or one that leaves the root.
  if (name.find('/') != std::string::npos || !step_of(fs::path(name))) return {};
  return root / name;
}

}  // namespace

fs::path read_latest(const fs::path& root) { return read_pointer(root, "latest"); }
fs::path read_best(const fs::path& root) { return read_pointer(root, "best"); }

namespace {

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  SO_CHECK(in, "cannot read " << path.string());
  return nlohmann::json::parse(in);  // nlohmann's parse_error names the position
}

// The checks every rank can make cheaply, and the CRCs of this rank's share of the files.
std::string local_problem(const fs::path& directory, int rank, int world, Verify verify) {
  if (!fs::is_directory(directory)) return directory.string() + " is not a directory";
  if (!fs::exists(directory / "DONE")) {
    return directory.string() + " has no DONE marker: the save did not complete (the job ended while writing it)";
  }
  try {
    const auto done = read_json(directory / "DONE");
    if (!fs::exists(directory / "manifest.json")) return (directory / "manifest.json").string() + " is missing";
    // Format 1 recorded zlib CRC32s, format 2 CRC32Cs; DONE's keys say which.
    const bool format1 = done.contains("manifest_crc32");
    const char* crc_name = format1 ? "CRC32" : "CRC32C";
    const auto file_crc = [format1](const fs::path& path) { return format1 ? file_crc32(path) : file_crc32c(path); };
    const auto manifest_crc = file_crc(directory / "manifest.json");
    if (manifest_crc != done.at(format1 ? "manifest_crc32" : "manifest_crc32c").get<uint32_t>()) {
      return (directory / "manifest.json").string() + " fails its " + crc_name +
             " check (recorded in DONE): the file is corrupted";
    }
    const auto manifest = read_json(directory / "manifest.json");
    const int version = manifest.at("format_version").get<int>();
    if (version < kOldestReadableCheckpointFormat || version > kCheckpointFormatVersion) {
      return directory.string() + " has checkpoint format " + std::to_string(version) + "; this build reads formats " +
             std::to_string(kOldestReadableCheckpointFormat) + " to " + std::to_string(kCheckpointFormatVersion);
    }
    if ((version == 1) != format1) {
      return (directory / "DONE").string() + " records " + crc_name + "s, which checkpoint format " +
             std::to_string(version) + " does not use";
    }
    // Fields validated before use: world_size 0 used to pass verification and export zeros.
    const auto world_size = manifest.at("world_size");
    if (!world_size.is_number_integer() || world_size.get<int64_t>() < 1 || world_size.get<int64_t>() > (1 << 20)) {
      return (directory / "manifest.json").string() + ": world_size " + world_size.dump() + " is not a rank count";
    }
    const int writers = world_size.get<int>();
    const auto& files = done.at("files");
    if (!files.is_object() || files.size() != static_cast<size_t>(writers)) {
      return (directory / "DONE").string() + " lists " + std::to_string(files.size()) + " rank files for a world of " +
             std::to_string(writers);
    }
    if (!manifest.at("layers").is_array() || manifest.at("layers").empty()) {
      return (directory / "manifest.json").string() + ": \"layers\" is not a non-empty list";
    }
    if (manifest.at("step").get<int64_t>() != step_of(directory).value_or(-1)) {
      return (directory / "manifest.json").string() + ": step " + manifest.at("step").dump() +
             " does not match the directory name";
    }
    for (int k = 0; k < writers; ++k) {
      const auto name = rank_file_name(k);
      const auto path = directory / name;
      if (!fs::exists(path)) return path.string() + " is missing (the checkpoint was written by " + std::to_string(writers) + " ranks)";
      const auto& record = files.at(name);
      const auto bytes = static_cast<uint64_t>(fs::file_size(path));
      if (bytes != record.at("bytes").get<uint64_t>()) {
        return path.string() + " has " + std::to_string(bytes) + " bytes, DONE recorded " +
               std::to_string(record.at("bytes").get<uint64_t>()) + ": the file was truncated or changed";
      }
      if (verify == Verify::everything && k % world == rank &&
          file_crc(path) != record.at(format1 ? "crc32" : "crc32c").get<uint32_t>()) {
        return path.string() + " fails its " + crc_name + " check (recorded in DONE): the file is corrupted";
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return directory.string() + ": DONE or manifest.json is malformed (" + e.what() + ")";
  } catch (const std::exception& e) {
    return directory.string() + ": " + e.what();
  }
  return {};
}

// Rank 0's text, on every rank.
std::string broadcast_string(std::string text, MPI_Comm comm) {
  int size = static_cast<int>(text.size());
  SO_CHECK_MPI(MPI_Bcast(&size, 1, MPI_INT, 0, comm));
  text.resize(static_cast<size_t>(size));
  SO_CHECK_MPI(MPI_Bcast(text.data(), size, MPI_CHAR, 0, comm));
  return text;
}

}  // namespace

std::string lowest_rank_failure(const std::string& mine, MPI_Comm comm) {
  int rank = 0;
  SO_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  int candidate = mine.empty() ? INT_MAX : rank, first = INT_MAX;
  SO_CHECK_MPI(MPI_Allreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == INT_MAX) return {};
  std::string text = mine;
  int size = static_cast<int>(text.size());
  SO_CHECK_MPI(MPI_Bcast(&size, 1, MPI_INT, first, comm));
  text.resize(static_cast<size_t>(size));
  SO_CHECK_MPI(MPI_Bcast(text.data(), size, MPI_CHAR, first, comm));
  return text;
}

std::string checkpoint_problem(const fs::path& directory, MPI_Comm comm, Verify verify) {
  int rank = 0, world = 1;
  SO_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  SO_CHECK_MPI(MPI_Comm_size(comm, &world));
  return lowest_rank_failure(local_problem(directory, rank, world, verify), comm);  // the lowest rank with a problem tells all
}

fs::path resolve_checkpoint(const fs::path& root, const std::string& request, MPI_Comm comm,
                            std::vector<std::string>& notes, Verify verify) {
  if (request != "latest") {
    const fs::path directory(request);
    const auto problem = checkpoint_problem(directory, comm, verify);
    SO_CHECK(problem.empty(), "cannot resume from " << request << ": " << problem
                                                    << hint("pick another checkpoint under " + root.string() +
                                                            ", or --resume latest"));
    return directory;
  }
  int rank = 0;
  SO_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  // Rank 0's view of the directory decides, so every rank tries the same candidates.
  std::string listing;
  if (rank == 0) {
    nlohmann::json names = nlohmann::json::array();
    const auto latest = read_latest(root);
    if (latest.empty() && fs::exists(root / "latest")) {
      notes.push_back((root / "latest").string() + " does not name a step directory beside it: ignored");
    }
    names.push_back(latest.empty() ? "" : latest.string());
    auto all = list_checkpoints(root);
    for (auto it = all.rbegin(); it != all.rend(); ++it) names.push_back(it->string());
    listing = names.dump();
  }
  const auto names = nlohmann::json::parse(broadcast_string(listing, comm));
  const std::string latest = names[0];
  if (!latest.empty()) {
    const auto problem = checkpoint_problem(latest, comm, verify);
    if (problem.empty()) return latest;
    notes.push_back("checkpoint 'latest' (" + latest + ") is not usable: " + problem);
  }
  for (size_t i = 1; i < names.size(); ++i) {
    const std::string candidate = names[i];
    if (candidate == latest) continue;
    const auto problem = checkpoint_problem(candidate, comm, verify);
    if (problem.empty()) {
      if (!notes.empty() || !latest.empty()) notes.push_back("falling back to " + candidate + ", the newest intact checkpoint");
      return candidate;
    }
    notes.push_back("skipping " + candidate + ": " + problem);
  }
  return {};
}

}  // namespace superoffload::io
