// safetensors files, without LibTorch: a memory-mapped reader that validates the header
// before anything is used (JSON well-formed, dtype known, shape × dtype size = byte range,
// ranges inside the file and not overlapping), checkpoints sharded with
// model.safetensors.index.json, and an atomic writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace superoffload::model {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, U16, U32, U64 };
const char* dtype_name(DType dtype);  // "BF16"
size_t dtype_size(DType dtype);

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // into the mapping; valid while the file is open
  size_t bytes = 0;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Throws superoffload::Error with a one-line message naming the file and the problem.
  static std::shared_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  void* mapping_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All weights of a HF model directory: model.safetensors, or the shards that
// model.safetensors.index.json lists (each opened once, on first use).
class SafetensorsCheckpoint {
 public:
  static SafetensorsCheckpoint open(const std::filesystem::path& directory);
  static bool exists_in(const std::filesystem::path& directory);

  std::vector<std::string> names() const;
  // Throws naming the tensor and the checkpoint when absent.
  const TensorView& get(const std::string& name);
  bool contains(const std::string& name) const { return shard_of_.count(name) != 0; }
  // The file that holds `name` (for messages); the directory when the name is unknown.
  std::filesystem::path path_of(const std::string& name) const;
  const std::filesystem::path& directory() const { return directory_; }

 private:
  std::filesystem::path directory_;
  std::map<std::string, std::string> shard_of_;  // tensor → file name
  std::map<std::string, std::shared_ptr<SafetensorsFile>> open_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel × dtype_size bytes, contiguous
};

// Writes one file atomically (temporary name, fsync, rename). Tensors are stored in the
// order given.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// One safetensors file written tensor by tensor, so that no more than the tensor being written
// need exist in memory: the header (every tensor's name, dtype and shape, known beforehand)
// goes first, then each tensor's bytes in that order. close() syncs it and gives it its name;
// until then it lives under a temporary one.
class SafetensorsFileWriter {
 public:
  // `tensors`' data pointers are not read.
  SafetensorsFileWriter(std::filesystem::path path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
  ~SafetensorsFileWriter();  // without close(): the temporary file is removed
  SafetensorsFileWriter(const SafetensorsFileWriter&) = delete;
  SafetensorsFileWriter& operator=(const SafetensorsFileWriter&) = delete;
  // The next tensor in the header's order (its name, dtype and shape must be the planned ones).
  void write(const TensorToWrite& tensor);
  bool complete() const { return next_ == planned_.size(); }
  void close();

 private:
  void write_all(const void* data, size_t size);
  std::filesystem::path path_, temporary_;
  std::vector<TensorToWrite> planned_;
  size_t next_ = 0;
  int fd_ = -1;
};

// Writes a HF weights directory in shards of at most `max_shard_bytes` (a single tensor
// larger than that gets a shard of its own): model-0000K-of-0000N.safetensors plus
// model.safetensors.index.json, or model.safetensors when everything fits in one. Every
// tensor's name, dtype and shape is given up front, so that each shard's header is known
// before its data: add() writes a tensor's bytes straight to its shard, and nothing is
// buffered (an export of a model larger than memory holds one tensor at a time).
class ShardedSafetensorsWriter {
 public:
  ShardedSafetensorsWriter(std::filesystem::path directory, size_t max_shard_bytes,
                           const std::vector<TensorToWrite>& tensors);
  // The next tensor, in the order given to the constructor.
  void add(const TensorToWrite& tensor);
  // Renames the shards to their final names and writes the index (every tensor must be added).
  void finish();

 private:
  std::filesystem::path directory_;
  std::vector<std::vector<TensorToWrite>> shards_;  // the plan: each shard's tensors in order
  size_t shard_ = 0;                                // the shard being written
  std::unique_ptr<SafetensorsFileWriter> file_;
  size_t total_bytes_ = 0;
};

// Parses "5GB", "500MB", "2GiB", "1000000" into bytes (GB = 10^9, GiB = 2^30, as HF does).
size_t parse_byte_size(const std::string& text);

}  // namespace superoffload::model
