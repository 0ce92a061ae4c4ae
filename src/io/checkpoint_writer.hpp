// Saves one checkpoint: every rank writes its file (fp32 master, exp_avg, exp_avg_sq and the
// step count of each layer shard, plus its RNG and optimizer state) under a temporary name and renames it;
// rank 0 then writes manifest.json and, after all files are in place, DONE (with every
// file's size and CRC32), and finally replaces `latest`. Older checkpoints beyond
// `keep_last` are deleted only after that. Works on host pointers, not tensors.
#pragma once

#include <mpi.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "io/rank_file.hpp"

namespace superoffload::io {

// One layer's shard state on the host, as the optimizer keeps it.
struct ShardView {
  const float* master = nullptr;
  const float* exp_avg = nullptr;
  const float* exp_avg_sq = nullptr;
  int64_t numel = 0;
  int64_t steps = 0;
};

// The rank's layer shards, handed to the writer one layer at a time: each layer's element
// count first (the file's layout is made before any data), then `fetch(l)` for l = 0, 1, … in
// order as the file reaches layer l, its pointers valid until the next call. A save thus needs
// host memory for one layer's copy of the state where the optimizer must make a copy (state on
// NVMe, bf16 moments, a layer in several sub-groups), not for the whole rank's.
struct ShardSource {
  std::vector<int64_t> numel;
  std::function<ShardView(size_t layer)> fetch;
};
// A source over views that all exist already and outlive it (benchmarks, tests).
ShardSource shard_source(const std::vector<ShardView>& views);

struct SaveResult {
  std::filesystem::path directory;
  uint64_t bytes = 0;      // all rank files
  double seconds = 0;
  bool already_saved = false;  // a complete checkpoint of this step existed
};

// What a rank keeps besides its shards, as named byte strings (each a u8 dataset of its rank
// file): "rng_state", "optimizer_state". A resume at the same world size reads them back.
using RankBlobs = std::map<std::string, std::vector<uint8_t>>;

// A save that failed on some rank, thrown on every rank of the save together: what failed
// (the lowest failing rank's reason) and which checkpoint `latest` still names. Nothing the
// save wrote is left behind, and `latest` has not moved.
class SaveFailed : public Error {
 public:
  SaveFailed(const std::string& what, std::string hint) : Error(what, std::move(hint), UserInput{}) {}
};

// Collective over `comm`. `manifest` (rank 0's is used) gets format_version, step and
// world_size added. Throws SaveFailed on every rank when any rank's part fails. `keep_last` <= 0
// keeps everything. `progress` (optional) hears what is
// being written, layer by layer, so a watchdog knows a long save is alive.
// `read_back_from`: where each rank file's CRCs are read back from (rank_file.hpp).
// `best`: `best` names this checkpoint too once it is complete (also when it existed already).
// The checkpoint `best` names is never deleted for keep_last.
SaveResult save_checkpoint(const std::filesystem::path& root, int64_t step, const ShardSource& shards,
                           const RankBlobs& rank_blobs, nlohmann::json manifest, int64_t keep_last,
                           MPI_Comm comm, const std::function<void(const std::string&)>& progress = nullptr,
                           ReadBack read_back_from = ReadBack::page_cache, bool best = false);

}  // namespace superoffload::io
