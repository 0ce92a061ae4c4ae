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

const std::vector<CheckpointReader::Placed>& CheckpointReader::placed(size_t layer) {
  auto [it, fresh] = placed_.try_emplace(layer);
  if (!fresh) return it->second;
  auto& pieces = it->second;
  const auto& entry = manifest_.at("layers").at(layer);
  const int64_t shard = entry.at("shard_numel").get<int64_t>();
  if (const auto found = entry.find("placement"); found != entry.end()) {
    SO_CHECK(found->size() == static_cast<size_t>(world_size()),
             directory_.string() << ": layer " << layer << "'s placement lists " << found->size() << " ranks of "
                                 << world_size());
    for (int r = 0; r < world_size(); ++r) {
      for (const auto& range : found->at(static_cast<size_t>(r))) {
        const Placed p{range.at(0).get<int64_t>(), range.at(2).get<int64_t>(), r, range.at(1).get<int64_t>()};
        SO_CHECK(p.begin >= 0 && p.length >= 0 && p.offset >= 0 && p.offset + p.length <= shard,
                 directory_.string() << ": layer " << layer << ", rank " << r << ": a placed range outside its shard");
        pieces.push_back(p);
      }
    }
    std::sort(pieces.begin(), pieces.end(), [](const Placed& a, const Placed& b) { return a.begin < b.begin; });
  } else {
    for (int r = 0; r < world_size(); ++r) pieces.push_back({r * shard, shard, r, 0});
  }
  return pieces;
}

void CheckpointReader::read_stored(int rank, size_t layer, const std::string& field, int64_t offset, int64_t length,
                                   float* out) {
  if (format_ == 1) {
    format1_file(rank).read_float_slice(dataset(layer, field), offset, length, out);
  } else {
    file(rank).read(dataset(layer, field), static_cast<uint64_t>(offset), static_cast<uint64_t>(length), out);
  }
}

void CheckpointReader::read(size_t layer, const std::string& field, int64_t begin, int64_t count, float* out) {
  const int64_t end = begin + count;
  // Elements no writer held (past its padding, or padding between placed ranges) read as 0.
  int64_t filled = begin;  // [begin, filled) is written
  const auto& pieces = placed(layer);
  // The first piece that ends after `begin`.
  auto it = std::upper_bound(pieces.begin(), pieces.end(), begin,
                             [](int64_t at, const Placed& p) { return at < p.begin + p.length; });
  for (; it != pieces.end() && it->begin < end; ++it) {
    const int64_t from = std::max(begin, it->begin), to = std::min(end, it->begin + it->length);
    if (from >= to) continue;
    if (from > filled) std::fill(out + (filled - begin), out + (from - begin), 0.0f);
    read_stored(it->rank, layer, field, it->offset + (from - it->begin), to - from, out + (from - begin));
    filled = to;
  }
  if (filled < end) std::fill(out + (filled - begin), out + count, 0.0f);
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
