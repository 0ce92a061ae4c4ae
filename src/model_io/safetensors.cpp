// safetensors reading (validated, memory-mapped) and writing (atomic, sharded).
#include "model_io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <utility>
#include <nlohmann/json.hpp>

#include "base/check_sys.hpp"
#include "base/error.hpp"
#include "io/checkpoint_files.hpp"

namespace superoffload::model {
namespace {

using json = nlohmann::json;

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8},   {DType::F32, "F32", 4},   {DType::F16, "F16", 2},        {DType::BF16, "BF16", 2},
    {DType::I64, "I64", 8},   {DType::I32, "I32", 4},   {DType::I16, "I16", 2},        {DType::I8, "I8", 1},
    {DType::U8, "U8", 1},     {DType::BOOL, "BOOL", 1}, {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::U16, "U16", 2},   {DType::U32, "U32", 4},   {DType::U64, "U64", 8},
};

// The header may not exceed 100 MB (the reference implementation's limit too).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void bad(const std::filesystem::path& path, const std::string& problem) {
  throw Error(path.string() + ": invalid safetensors file: " + problem,
              "the file is truncated or corrupt; download or export it again", Error::UserInput{});
}

}  // namespace

const char* dtype_name(DType dtype) {
  for (const auto& info : kDTypes) {
    if (info.dtype == dtype) return info.name;
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  for (const auto& info : kDTypes) {
    if (info.dtype == dtype) return info.size;
  }
  return 0;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SO_CHECK_SYS(fd, "opening " << path.string());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    bad(path, "cannot stat");
  }
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ < 8) {
    ::close(fd);
    bad(path, "only " + std::to_string(file->size_) + " bytes, shorter than the 8-byte header length");
  }
  void* mapping = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) bad(path, std::string("mmap failed: ") + std::strerror(errno));
  file->mapping_ = mapping;
  const auto* bytes = static_cast<const std::byte*>(mapping);

  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes, 8);  // little-endian on every supported platform
  if (header_size > kMaxHeaderBytes) bad(path, "header length " + std::to_string(header_size) + " is implausible");
  if (8 + header_size > file->size_) {
    bad(path, "header of " + std::to_string(header_size) + " bytes runs past the end of the " +
                  std::to_string(file->size_) + "-byte file");
  }
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(bytes + 8), reinterpret_cast<const char*>(bytes + 8 + header_size));
  } catch (const json::parse_error& e) {
    bad(path, std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) bad(path, "header is not a JSON object");

  const size_t data_start = 8 + header_size;
  const size_t data_size = file->size_ - data_start;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) bad(path, "__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) bad(path, "__metadata__ value \"" + m.key() + "\" is not a string");
        file->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets")) {
      bad(path, "entry \"" + name + "\" lacks dtype, shape or data_offsets");
    }
    TensorView view;
    view.name = name;
    const auto dtype_text = entry["dtype"].is_string() ? entry["dtype"].get<std::string>() : entry["dtype"].dump();
    const auto* info = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                    [&](const DTypeInfo& d) { return dtype_text == d.name; });
    if (info == std::end(kDTypes)) bad(path, "tensor \"" + name + "\" has unknown dtype " + dtype_text);
    view.dtype = info->dtype;
    if (!entry["shape"].is_array()) bad(path, "tensor \"" + name + "\" has a shape that is not an array");
    uint64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) bad(path, "tensor \"" + name + "\" has a negative or non-integer dimension");
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > UINT64_MAX / dim) bad(path, "tensor \"" + name + "\" has an overflowing shape");
      numel *= dim;
      view.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      bad(path, "tensor \"" + name + "\" has malformed data_offsets");
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end) bad(path, "tensor \"" + name + "\" has data_offsets that run backwards");
    if (end > data_size) {
      bad(path, "tensor \"" + name + "\" ends at byte " + std::to_string(end) + " of a " + std::to_string(data_size) +
                    "-byte data section (file truncated?)");
    }
    if (end - begin != numel * info->size) {
      bad(path, "tensor \"" + name + "\" holds " + std::to_string(end - begin) + " bytes but its shape and " +
                    info->name + " need " + std::to_string(numel * info->size));
    }
    view.data = bytes + data_start + begin;
    view.bytes = end - begin;
    ranges.emplace_back(begin, end);
    file->tensors_.emplace(name, std::move(view));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) bad(path, "two tensors' byte ranges overlap");
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) ::munmap(mapping_, size_);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

bool SafetensorsCheckpoint::exists_in(const std::filesystem::path& directory) {
  return std::filesystem::exists(directory / "model.safetensors") ||
         std::filesystem::exists(directory / "model.safetensors.index.json");
}

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::filesystem::path& directory) {
  SafetensorsCheckpoint checkpoint;
  checkpoint.directory_ = directory;
  const auto index_path = directory / "model.safetensors.index.json";
  if (std::filesystem::exists(index_path)) {
    std::ifstream in(index_path);
    json index;
    try {
      index = json::parse(in);
    } catch (const json::parse_error& e) {
      throw Error(index_path.string() + ": not valid JSON: " + e.what(), {}, Error::UserInput{});
    }
    if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw Error(index_path.string() + ": has no \"weight_map\" object", {}, Error::UserInput{});
    }
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      // A shard is a file in this directory: no absolute path, no way out of it.
      const auto& shard = it.value();
      if (!shard.is_string() || shard.get<std::string>().empty() || shard.get<std::string>().find('/') != std::string::npos ||
          shard.get<std::string>() == "." || shard.get<std::string>() == "..") {
        throw Error(index_path.string() + ": weight_map[\"" + it.key() + "\"] = " + shard.dump() +
                        " is not the name of a file in " + directory.string(),
                    "shard names in model.safetensors.index.json are plain file names", Error::UserInput{});
      }
      checkpoint.shard_of_[it.key()] = shard.get<std::string>();
    }
  } else if (std::filesystem::exists(directory / "model.safetensors")) {
    auto file = SafetensorsFile::open(directory / "model.safetensors");
    for (const auto& [name, view] : file->tensors()) checkpoint.shard_of_[name] = "model.safetensors";
    checkpoint.open_["model.safetensors"] = file;
  } else {
    throw Error(directory.string() + " has no model.safetensors or model.safetensors.index.json",
                "point [model] path at a HuggingFace model directory, or use [model] init = \"random\"",
                Error::UserInput{});
  }
  return checkpoint;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, shard] : shard_of_) out.push_back(name);
  return out;
}

std::filesystem::path SafetensorsCheckpoint::path_of(const std::string& name) const {
  auto it = shard_of_.find(name);
  return it == shard_of_.end() ? directory_ : directory_ / it->second;
}

const TensorView& SafetensorsCheckpoint::get(const std::string& name) {
  auto it = shard_of_.find(name);
  if (it == shard_of_.end()) {
    throw Error("tensor \"" + name + "\" is not in the checkpoint at " + directory_.string(), {}, Error::UserInput{});
  }
  auto& file = open_[it->second];
  if (!file) file = SafetensorsFile::open(directory_ / it->second);
  const TensorView* view = file->find(name);
  if (!view) {
    throw Error((directory_ / it->second).string() + " does not hold tensor \"" + name +
                    "\" that model.safetensors.index.json places there",
                {}, Error::UserInput{});
  }
  return *view;
}

namespace {

uint64_t byte_size(const TensorToWrite& t) {
  uint64_t numel = 1;
  for (auto d : t.shape) numel *= static_cast<uint64_t>(d);
  return numel * dtype_size(t.dtype);
}

}  // namespace

SafetensorsFileWriter::SafetensorsFileWriter(std::filesystem::path path, const std::vector<TensorToWrite>& tensors,
                                             const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), temporary_(path_.string() + ".tmp"), planned_(tensors) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (auto& t : planned_) {
    const uint64_t bytes = byte_size(t);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    t.data = nullptr;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  SO_CHECK_SYS(fd_, "creating " << temporary_.string());
  const uint64_t header_size = text.size();
  write_all(&header_size, 8);
  write_all(text.data(), text.size());
}

SafetensorsFileWriter::~SafetensorsFileWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  std::error_code ignored;
  std::filesystem::remove(temporary_, ignored);
}

void SafetensorsFileWriter::write_all(const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    SO_CHECK_SYS(n, "writing " << temporary_.string());
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void SafetensorsFileWriter::write(const TensorToWrite& tensor) {
  SO_CHECK(next_ < planned_.size(), path_.string() << ": " << tensor.name << " is one tensor more than planned");
  const auto& planned = planned_[next_];
  SO_CHECK(tensor.name == planned.name && tensor.dtype == planned.dtype && tensor.shape == planned.shape,
           path_.string() << ": " << tensor.name << " comes where " << planned.name
                          << " was planned, or with another dtype or shape");
  write_all(tensor.data, byte_size(tensor));
  ++next_;
}

void SafetensorsFileWriter::close() {
  SO_CHECK(complete(), path_.string() << ": closed after " << next_ << " of its " << planned_.size() << " tensors");
  SO_CHECK_SYS(::fsync(fd_), "flushing " << temporary_.string());
  const int fd = std::exchange(fd_, -1);
  SO_CHECK_SYS(::close(fd), "closing " << temporary_.string());
  SO_CHECK_SYS(::rename(temporary_.c_str(), path_.c_str()),
               "renaming " << temporary_.string() << " to " << path_.string());
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  SafetensorsFileWriter file(path, tensors, metadata);
  for (const auto& t : tensors) file.write(t);
  file.close();
}

namespace {

std::string shard_name(size_t index, size_t count) {
  if (count == 1) return "model.safetensors";
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

}  // namespace

ShardedSafetensorsWriter::ShardedSafetensorsWriter(std::filesystem::path directory, size_t max_shard_bytes,
                                                   const std::vector<TensorToWrite>& tensors)
    : directory_(std::move(directory)) {
  std::filesystem::create_directories(directory_);
  // HF's rule: a shard takes tensors until the next would pass the limit.
  const size_t limit = std::max<size_t>(1, max_shard_bytes);
  size_t in_shard = 0;
  for (const auto& t : tensors) {
    const uint64_t bytes = byte_size(t);
    if (shards_.empty() || (!shards_.back().empty() && in_shard + bytes > limit)) {
      shards_.emplace_back();
      in_shard = 0;
    }
    shards_.back().push_back(t);
    in_shard += bytes;
    total_bytes_ += bytes;
  }
}

void ShardedSafetensorsWriter::add(const TensorToWrite& tensor) {
  SO_CHECK(shard_ < shards_.size(), directory_.string() << ": " << tensor.name << " was not planned");
  if (!file_) {
    // Under a temporary name until every shard is written (its final name says how many).
    const auto temporary = directory_ / ("shard-" + std::to_string(shard_) + ".partial.safetensors");
    file_ = std::make_unique<SafetensorsFileWriter>(temporary, shards_[shard_]);
  }
  file_->write(tensor);
  if (file_->complete()) {
    file_->close();
    file_.reset();
    ++shard_;
  }
}

void ShardedSafetensorsWriter::finish() {
  SO_CHECK(shard_ == shards_.size(), directory_.string() << ": finished with " << shard_ << " of "
                                                         << shards_.size() << " shards written");
  json weight_map = json::object();
  for (size_t i = 0; i < shards_.size(); ++i) {
    const auto name = shard_name(i, shards_.size());
    std::filesystem::rename(directory_ / ("shard-" + std::to_string(i) + ".partial.safetensors"), directory_ / name);
    for (const auto& tensor : shards_[i]) weight_map[tensor.name] = name;
  }
  const auto index_path = directory_ / "model.safetensors.index.json";
  if (shards_.size() == 1) {
    std::filesystem::remove(index_path);
    return;
  }
  json index = {{"metadata", {{"total_size", total_bytes_}}}, {"weight_map", weight_map}};
  io::write_file_atomically(index_path, index.dump(2) + "\n");
}

size_t parse_byte_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  SO_CHECK(i > 0, "size \"" << text << "\" does not start with a number (e.g. 5GB, 500MB)");
  const double number = std::stod(text.substr(0, i));
  std::string unit = text.substr(i);
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::toupper(c); });
  double scale = 1;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  else if (unit == "TB") scale = 1e12;
  else if (unit == "KIB") scale = 1024.0;
  else if (unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "GIB") scale = 1024.0 * 1024 * 1024;
  else SO_FAIL("size \"" << text << "\" has an unknown unit \"" << unit << "\" (use B, KB, MB, GB, KiB, MiB, GiB)");
  return static_cast<size_t>(number * scale);
}

}  // namespace superoffload::model
