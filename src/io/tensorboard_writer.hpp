// TensorBoard event files ("events.out.tfevents.*"): scalars as TensorBoard and TensorFlow's
// summary readers expect them. Each record is framed as TFRecord frames it: the length
// (uint64, little-endian), its masked CRC32C, the serialized Event (protobuf, from
// tensorboard_event.proto) and the data's masked CRC32C. The first record names the file
// version ("brain.Event:2"). Every write is checked; flush() makes the records so far durable
// for a reader (TensorBoard follows a file that grows).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

namespace superoffload::io {

class TensorBoardWriter {
 public:
  // Creates `directory` (and parents) and a new event file in it.
  explicit TensorBoardWriter(const std::filesystem::path& directory);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void scalar(const std::string& tag, double value, int64_t step, double wall_time_s);
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// TFRecord's masked CRC32C of `data` (a CRC of a CRC-bearing record must not be the CRC).
uint32_t tfrecord_masked_crc(const void* data, size_t size);

}  // namespace superoffload::io
