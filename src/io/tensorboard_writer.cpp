// TensorBoardWriter.
#include "io/tensorboard_writer.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/error.hpp"
#include "io/crc32c.hpp"
#include "io/tensorboard_event.pb.h"

namespace superoffload::io {

namespace fs = std::filesystem;

uint32_t tfrecord_masked_crc(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size, 0);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const fs::path& directory) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  SO_CHECK(!ec, "cannot create the TensorBoard directory " << directory.string() << ": " << ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  char name[400];
  // TensorBoard's own naming: seconds, host, process, and a sequence number.
  std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%d.0",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(now).count()), host,
                static_cast<int>(::getpid()));
  path_ = directory / name;
  file_ = std::fopen(path_.c_str(), "ab");
  SO_CHECK(file_, "cannot create " << path_.string() << ": " << std::strerror(errno));
  tensorboard::Event version;
  version.set_wall_time(std::chrono::duration<double>(now).count());
  version.set_file_version("brain.Event:2");
  write_record(version.SerializeAsString());
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step, double wall_time_s) {
  tensorboard::Event event;
  event.set_wall_time(wall_time_s);
  event.set_step(step);
  auto* summary_value = event.mutable_summary()->add_value();
  summary_value->set_tag(tag);
  summary_value->set_simple_value(static_cast<float>(value));
  write_record(event.SerializeAsString());
}

void TensorBoardWriter::write_record(const std::string& data) {
  unsigned char header[12];
  const uint64_t length = data.size();
  for (int i = 0; i < 8; ++i) header[i] = static_cast<unsigned char>(length >> (8 * i));  // little-endian
  const uint32_t length_crc = tfrecord_masked_crc(header, 8), data_crc = tfrecord_masked_crc(data.data(), data.size());
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<unsigned char>(length_crc >> (8 * i));
  unsigned char footer[4];
  for (int i = 0; i < 4; ++i) footer[i] = static_cast<unsigned char>(data_crc >> (8 * i));
  const bool ok = std::fwrite(header, 1, sizeof header, file_) == sizeof header &&
                  std::fwrite(data.data(), 1, data.size(), file_) == data.size() &&
                  std::fwrite(footer, 1, sizeof footer, file_) == sizeof footer;
  SO_CHECK(ok, "writing " << path_.string() << " failed: " << std::strerror(errno));
}

void TensorBoardWriter::flush() {
  SO_CHECK(std::fflush(file_) == 0, "writing " << path_.string() << " failed: " << std::strerror(errno));
}

}  // namespace superoffload::io
