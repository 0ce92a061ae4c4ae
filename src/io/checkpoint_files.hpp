// The on-disk layout of checkpoints and what makes one complete:
//   <root>/step_<8 digits>/rank_<5 digits>.h5   one per rank (shards and moments, checksummed)
//   <root>/step_<8 digits>/manifest.json        rank 0: layout, model, config, versions
//   <root>/step_<8 digits>/DONE                 written last: manifest CRC, each file's size and CRC
//   <root>/latest                               the name of the newest complete one (atomic rename)
//   <root>/best                                 [checkpoint] keep_best: the one of the lowest eval loss
// A directory without DONE, or whose files do not match it, is never resumed from.
//
// Format 2 (written now): contiguous datasets with per-block CRC32C attributes (rank_file.hpp);
// DONE holds CRC32Cs ("manifest_crc32c", files' "crc32c"). Format 1 (read still): chunked
// datasets with HDF5's Fletcher32 filter; DONE holds zlib CRC32s ("manifest_crc32", "crc32").
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace superoffload::io {

inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr int kOldestReadableCheckpointFormat = 1;

std::string step_directory_name(int64_t step);  // "step_00000042"
std::string rank_file_name(int rank);            // "rank_00003.h5"
// The step of a "step_<digits>" directory, if it is one.
std::optional<int64_t> step_of(const std::filesystem::path& directory);

// zlib's CRC32 of a whole file (format 1's DONE).
uint32_t file_crc32(const std::filesystem::path& path);
// fsync of a file or a directory (after a rename), so a crash keeps what was written.
void sync_path(const std::filesystem::path& path);
// Writes `text` to `path` through a temporary file and an atomic rename.
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

// step_* directories under `root`, oldest first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& root);
// What `latest` names (empty when there is no `latest`).
std::filesystem::path read_latest(const std::filesystem::path& root);
// What `best` names (empty when there is none).
std::filesystem::path read_best(const std::filesystem::path& root);

// How much of a checkpoint checkpoint_problem reads.
enum class Verify {
  // DONE, the manifest and its CRC, the rank files and their sizes: what a resume needs before
  // it reads, since every byte it then reads is checked against its dataset's checksums (and a
  // failed read falls back to an older checkpoint).
  structure,
  // Also the CRC of every rank file, read whole (inspect, export).
  everything,
};

// Why the checkpoint in `directory` cannot be used, or "" when it is complete. Collective over
// `comm`: every rank checks the structure, and with Verify::everything the CRC of the rank
// files k with k mod world = rank, so the data is read once in all; every rank gets the same
// answer.
std::string checkpoint_problem(const std::filesystem::path& directory, MPI_Comm comm,
                               Verify verify = Verify::everything);
// Collective: the message of the lowest rank whose `mine` is not empty, on every rank; "" when
// every rank passed "".
std::string lowest_rank_failure(const std::string& mine, MPI_Comm comm);

// The checkpoint to resume from: `request` is "latest" or a checkpoint directory. A broken
// `latest` falls back to the newest intact checkpoint, and `notes` says why; a broken explicit
// path is an error. Empty when "latest" finds no checkpoint at all. Collective.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& root, const std::string& request, MPI_Comm comm,
                                         std::vector<std::string>& notes, Verify verify = Verify::everything);

}  // namespace superoffload::io
