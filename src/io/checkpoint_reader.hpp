// Reads a checkpoint written by any number of ranks: the manifest's layout says where each
// layer's flat elements lie (rank k of M holds [k·shard, (k+1)·shard), or, under expert
// parallelism, the ranges the layer's "placement" lists for it), so a run of N ranks reads
// exactly the slices of its own shards from the files that hold them. Every byte read is
// checked: format 2 against its block's CRC32C, format 1 by HDF5's Fletcher32 filter.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace superoffload::io {

class Hdf5File;
class RankFileReader;

class CheckpointReader {
 public:
  // Reads manifest.json; integrity is checked beforehand (checkpoint_problem). `threads`: how
  // many threads each read may use (the rank's cores; a resume has nothing else to run).
  explicit CheckpointReader(std::filesystem::path directory, int threads = 1);
  ~CheckpointReader();

  const std::filesystem::path& directory() const { return directory_; }
  const nlohmann::json& manifest() const { return manifest_; }
  int64_t step() const;
  int world_size() const;
  size_t layers() const;

  // `field` ("master", "exp_avg" or "exp_avg_sq") of layer `layer` at flat elements
  // [begin, begin + count) (the writer's padding beyond the parameters reads as 0).
  void read(size_t layer, const std::string& field, int64_t begin, int64_t count, float* out);
  int64_t steps(size_t layer);
  // The blob `name` rank `rank` saved (checkpoint_writer.hpp's RankBlobs); empty when it saved none.
  std::vector<uint8_t> rank_blob(int rank, const std::string& name);

 private:
  // A piece of a layer's flat elements in one writer's shard.
  struct Placed {
    int64_t begin = 0, length = 0;  // in the layer's flat layout
    int rank = 0;
    int64_t offset = 0;             // in that rank's shard
  };
  // The layer's pieces in flat order: from its placement, else one per writer rank.
  const std::vector<Placed>& placed(size_t layer);
  void read_stored(int rank, size_t layer, const std::string& field, int64_t offset, int64_t length, float* out);
  Hdf5File& format1_file(int rank);
  RankFileReader& file(int rank);
  std::filesystem::path directory_;
  nlohmann::json manifest_;
  int format_ = 0;
  int threads_ = 1;
  std::map<int, std::unique_ptr<Hdf5File>> format1_files_;
  std::map<int, std::unique_ptr<RankFileReader>> files_;
  std::map<size_t, std::vector<Placed>> placed_;
};

}  // namespace superoffload::io
