// CheckpointReader.
#include "io/checkpoint_reader.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "base/error.hpp"
#include "io/checkpoint_files.hpp"
#include "io/hdf5_file.hpp"
#include "io/rank_file.hpp"

namespace superoffload::io {

namespace fs = std::filesystem;

CheckpointReader::CheckpointReader(fs::path directory, int threads)
    : directory_(std::move(directory)), threads_(threads) {
  std::ifstream in(directory_ / "manifest.json");
  SO_CHECK(in, "cannot read " << (directory_ / "manifest.json").string());
  manifest_ = nlohmann::json::parse(in);
  format_ = manifest_.at("format_version").get<int>();
}

CheckpointReader::~CheckpointReader() = default;

int64_t CheckpointReader::step() const { return manifest_.at("step").get<int64_t>(); }
int CheckpointReader::world_size() const { return manifest_.at("world_size").get<int>(); }
size_t CheckpointReader::layers() const { return manifest_.at("layers").size(); }

Hdf5File& CheckpointReader::format1_file(int rank) {
  auto& slot = format1_files_[rank];
  if (!slot) slot = std::make_unique<Hdf5File>(Hdf5File::open_read((directory_ / rank_file_name(rank)).string()));
  return *slot;
}

RankFileReader& CheckpointReader::file(int rank) {
  auto& slot = files_[rank];
  if (!slot) slot = std::make_unique<RankFileReader>(directory_ / rank_file_name(rank), threads_);
  return *slot;
}

namespace {

std::string dataset(size_t layer, const std::string& field) {
  char name[48];
  std::snprintf(name, sizeof name, "layers/%05zu/%s", layer, field.c_str());
  return name;
}

}  // namespace

void CheckpointReader::read(size_t layer, const std::string& field, int64_t begin, int64_t count, float* out) {
  const auto& entry = manifest_.at("layers").at(layer);
  const int64_t shard = entry.at("shard_numel").get<int64_t>();
  const int64_t stored = shard * world_size();
  const int64_t end = begin + count;
  // Elements past the stored ones (the writer's world had less padding) read as 0.
  if (end > stored) std::fill(out + std::max<int64_t>(0, stored - begin), out + count, 0.0f);
  for (int64_t at = begin; at < std::min(end, stored);) {
    const int owner = static_cast<int>(at / shard);
    const int64_t offset = at - owner * shard;
    const int64_t length = std::min(end, (owner + 1) * shard) - at;
    if (format_ == 1) {
      format1_file(owner).read_float_slice(dataset(layer, field), offset, length, out + (at - begin));
    } else {
      file(owner).read(dataset(layer, field), static_cast<uint64_t>(offset), static_cast<uint64_t>(length),
                       out + (at - begin));
    }
    at += length;
  }
}

int64_t CheckpointReader::steps(size_t layer) {
  if (format_ == 1) return format1_file(0).read_int64(dataset(layer, "steps")).values.at(0);
  int64_t steps = 0;
  file(0).read(dataset(layer, "steps"), 0, 1, &steps);
  return steps;
}

std::vector<uint8_t> CheckpointReader::rank_blob(int rank, const std::string& name) {
  if (format_ == 1) {
    auto& f = format1_file(rank);
    return f.has(name) ? f.read_uint8(name).values : std::vector<uint8_t>{};
  }
  auto& f = file(rank);
  if (!f.has(name)) return {};
  std::vector<uint8_t> blob(f.count(name));
  f.read(name, 0, blob.size(), blob.data());
  return blob;
}

}  // namespace superoffload::io
