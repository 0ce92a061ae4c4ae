// save_checkpoint.
#include "io/checkpoint_writer.hpp"

#include <cstdio>

#include "base/error.hpp"
#include "base/timer.hpp"
#include "cluster/check_mpi.hpp"
#include "io/checkpoint_files.hpp"
#include "io/crc32c.hpp"
#include "io/rank_file.hpp"

namespace superoffload::io {

namespace fs = std::filesystem;

namespace {

std::string layer_group(size_t layer) {
  char name[32];
  std::snprintf(name, sizeof name, "layers/%05zu/", layer);
  return name;
}

// A rank file is written under this name and renamed when complete.
fs::path partial_of(const fs::path& path) { return path.string() + ".partial"; }

// The rank file's datasets: per layer the three fp32 arrays and the step count, then the
// header and the rank's blobs. Written under a temporary name, renamed when complete. Each
// layer's state is fetched when its master's turn comes and held until the next layer's.
WrittenFile write_rank(const fs::path& path, int64_t step, int rank, const ShardSource& shards,
                       const RankBlobs& rank_blobs, const std::function<void(const std::string&)>& progress,
                       ReadBack read_back_from) {
  ShardView current;
  size_t current_layer = SIZE_MAX;
  auto of_layer = [&](size_t l) -> const ShardView& {
    SO_CHECK(current_layer == l, "the rank file's datasets of layer " << l << " are written out of order");
    return current;
  };
  std::vector<DatasetSource> datasets;
  for (size_t l = 0; l < shards.numel.size(); ++l) {
    const auto group = layer_group(l);
    const auto numel = static_cast<uint64_t>(shards.numel[l]);
    datasets.push_back({group + "master", ElementType::f32, nullptr, numel, [&, l]() -> const void* {
                          try {
                            current = shards.fetch(l);
                          } catch (const std::exception& e) {  // said as what it is, not as a write error
                            SO_FAIL("layer " << l << "'s optimizer state could not be read for the checkpoint: " << e.what());
                          }
                          current_layer = l;
                          SO_CHECK(current.numel == shards.numel[l], "layer " << l << "'s shard holds " << current.numel
                                                                               << " elements, not the " << shards.numel[l] << " laid out");
                          return current.master;
                        }});
    datasets.push_back({group + "exp_avg", ElementType::f32, nullptr, numel, [&, l]() -> const void* { return of_layer(l).exp_avg; }});
    datasets.push_back(
        {group + "exp_avg_sq", ElementType::f32, nullptr, numel, [&, l]() -> const void* { return of_layer(l).exp_avg_sq; }});
    datasets.push_back({group + "steps", ElementType::i64, nullptr, 1, [&, l]() -> const void* { return &of_layer(l).steps; }});
  }
  const int64_t header[3] = {kCheckpointFormatVersion, step, rank};
  datasets.push_back({"header", ElementType::i64, header, 3});
  for (const auto& [name, bytes] : rank_blobs) {
    if (!bytes.empty()) datasets.push_back({name, ElementType::u8, bytes.data(), bytes.size()});
  }
  const fs::path partial = partial_of(path);
  const auto written = write_rank_file(partial, datasets, progress, read_back_from);
  fs::rename(partial, path);
  return written;
}

// The operating system's reason in an error from a write: HDF5's error stack is long, and the
// reason is the part a user needs.
std::string reason_of(const std::string& cause) {
  const std::string marker = "error message = '";
  if (const auto at = cause.find(marker); at != std::string::npos) {
    return cause.substr(at + marker.size(), cause.find('\'', at + marker.size()) - at - marker.size());
  }
  return cause;
}

// Ends a save that failed on some rank (`failure`, agreed by all): rank 0 removes what the
// save left, so that the space is free again and nothing of it claims to be complete, and
// every rank throws SaveFailed saying what failed and which checkpoint a resume would use.
[[noreturn]] void throw_save_failed(const fs::path& root, const fs::path& directory, int rank,
                                    const std::string& failure) {
  if (rank == 0) {
    std::error_code ignored;
    fs::remove_all(directory, ignored);
  }
  const auto latest = read_latest(root);
  throw SaveFailed("the checkpoint " + directory.string() + " could not be written (" + failure + "); 'latest' still names " +
                       (latest.empty() ? std::string("no checkpoint") : latest.string()),
                   "free space on the file system of [training] output_dir (or raise the quota), then resume: the job "
                   "restarts from 'latest'");
}

}  // namespace

ShardSource shard_source(const std::vector<ShardView>& views) {
  ShardSource source;
  for (const auto& v : views) source.numel.push_back(v.numel);
  source.fetch = [&views](size_t layer) { return views.at(layer); };
  return source;
}

SaveResult save_checkpoint(const fs::path& root, int64_t step, const ShardSource& shards,
                           const RankBlobs& rank_blobs, nlohmann::json manifest, int64_t keep_last,
                           MPI_Comm comm, const std::function<void(const std::string&)>& progress,
                           ReadBack read_back_from, bool best) {
  const double start_s = base::now_s();
  int rank = 0, world = 1;
  SO_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  SO_CHECK_MPI(MPI_Comm_size(comm, &world));
  SaveResult result;
  result.directory = root / step_directory_name(step);

  // Rank 0 prepares the directory: a complete checkpoint of this step is kept as it is; a
  // leftover without DONE (a save cut short) is cleared.
  int exists = 0;
  std::string failure;
  if (rank == 0) {
    try {
      fs::create_directories(root);
      if (fs::exists(result.directory / "DONE")) {
        exists = 1;
      } else {
        fs::remove_all(result.directory);
        fs::create_directories(result.directory);
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (failure = lowest_rank_failure(failure, comm); !failure.empty()) throw_save_failed(root, result.directory, rank, failure);
  SO_CHECK_MPI(MPI_Bcast(&exists, 1, MPI_INT, 0, comm));
  if (exists) {
    result.already_saved = true;
    if (best) {
      if (rank == 0) {
        try {
          write_file_atomically(root / "best", step_directory_name(step) + "\n");
        } catch (const std::exception& e) {
          failure = reason_of(e.what());
        }
      }
      // The checkpoint itself is complete and stays; only the pointer is missing.
      if (failure = lowest_rank_failure(failure, comm); !failure.empty()) {
        throw SaveFailed("cannot name " + result.directory.string() + " as " + (root / "best").string() + ": " + failure,
                         "free space on the file system of [training] output_dir (or raise the quota)");
      }
    }
    return result;
  }

  // Every rank writes its file; a failure on any (a full disk, a quota, an I/O error, a
  // read-back that differs) is agreed by all, so the job can end or go on together.
  const fs::path mine = result.directory / rank_file_name(rank);
  WrittenFile written;
  try {
    written = write_rank(mine, step, rank, shards, rank_blobs, progress, read_back_from);
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove(partial_of(mine), ignored);
    failure = mine.filename().string() + ": " + reason_of(e.what());
  }
  if (failure = lowest_rank_failure(failure, comm); !failure.empty()) throw_save_failed(root, result.directory, rank, failure);
  // The size and the CRC32C of the file as it was read back after fsync.
  uint64_t record[2] = {written.bytes, written.crc32c};
  std::vector<uint64_t> records(static_cast<size_t>(2 * world));
  SO_CHECK_MPI(MPI_Gather(record, 2, MPI_UINT64_T, records.data(), 2, MPI_UINT64_T, 0, comm));

  if (rank == 0) {
    try {
      manifest["format_version"] = kCheckpointFormatVersion;
      manifest["step"] = step;
      manifest["world_size"] = world;
      write_file_atomically(result.directory / "manifest.json", manifest.dump(1));
      nlohmann::json done;
      done["manifest_crc32c"] = file_crc32c(result.directory / "manifest.json");
      for (int k = 0; k < world; ++k) {
        done["files"][rank_file_name(k)] = {{"bytes", records[static_cast<size_t>(2 * k)]},
                                            {"crc32c", records[static_cast<size_t>(2 * k + 1)]}};
        result.bytes += records[static_cast<size_t>(2 * k)];
      }
      // Every rank file was renamed into place before the gather: DONE is the last word.
      write_file_atomically(result.directory / "DONE", done.dump(1));
      write_file_atomically(root / "latest", step_directory_name(step) + "\n");
      if (best) write_file_atomically(root / "best", step_directory_name(step) + "\n");
    } catch (const std::exception& e) {
      failure = reason_of(e.what());
    }
    // Only now may older checkpoints go: the newest `keep_last` complete ones stay, and
    // incomplete leftovers older than this one are cleared. A leftover that cannot be removed
    // is tried again at the next save.
    if (failure.empty() && keep_last > 0) {
      auto all = list_checkpoints(root);
      const auto kept_best = read_best(root);
      int64_t complete_seen = 0;
      for (auto it = all.rbegin(); it != all.rend(); ++it) {
        if (step_of(*it).value_or(0) > step) continue;
        const bool complete = fs::exists(*it / "DONE");
        if (complete && ++complete_seen <= keep_last) continue;
        if (complete && !kept_best.empty() && it->filename() == kept_best.filename()) continue;
        std::error_code ignored;
        fs::remove_all(*it, ignored);
      }
    }
  }
  if (failure = lowest_rank_failure(failure, comm); !failure.empty()) throw_save_failed(root, result.directory, rank, failure);
  SO_CHECK_MPI(MPI_Bcast(&result.bytes, 1, MPI_UINT64_T, 0, comm));
  result.seconds = base::now_s() - start_s;
  return result;
}

}  // namespace superoffload::io
