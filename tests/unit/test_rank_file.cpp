// Checkpoint format 2's pieces: CRC32C against RFC 3720's test vectors, and rank files read
// back whole and in slices (the resharding case), by one thread and by several, with
// corruption in a dataset's bytes named.
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.hpp"
#include "io/crc32c.hpp"
#include "io/hdf5_file.hpp"
#include "io/rank_file.hpp"

namespace io = superoffload::io;
namespace fs = std::filesystem;

namespace {

fs::path scratch_dir(const char* name) {
  const auto dir = fs::temp_directory_path() / ("so_rank_file_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST(Crc32c, MatchesTheIscsiTestVectors) {
  // RFC 3720, B.4.
  std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xff), rising(32), falling(32);
  std::iota(rising.begin(), rising.end(), 0);
  for (int i = 0; i < 32; ++i) falling[static_cast<size_t>(i)] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(io::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(io::crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(io::crc32c(rising.data(), rising.size()), 0x46DD794Eu);
  EXPECT_EQ(io::crc32c(falling.data(), falling.size()), 0x113FDB5Cu);
  EXPECT_EQ(io::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(io::crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, ChainsLikeOnePass) {
  std::vector<unsigned char> data(100003);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  const uint32_t whole = io::crc32c(data.data(), data.size());
  uint32_t chained = 0;
  for (size_t at = 0; at < data.size(); at += 4099) chained = io::crc32c(data.data() + at, std::min<size_t>(4099, data.size() - at), chained);
  EXPECT_EQ(chained, whole);
  const auto dir = scratch_dir("chain");
  std::ofstream(dir / "f", std::ios::binary).write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  EXPECT_EQ(io::file_crc32c(dir / "f"), whole);
  fs::remove_all(dir);
}

TEST(Crc32c, TheFusedCopyChecksumsAndCopiesLikeTwoPasses) {
  // Sizes around the fused loop's three lanes of 32 KiB (96 KiB steps) and its word and byte
  // tails, at odd source and destination offsets, continuing from a CRC.
  std::vector<unsigned char> data((size_t{1} << 20) + 64);
  uint64_t x = 88172645463325252ull;
  for (auto& byte : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    byte = static_cast<unsigned char>(x);
  }
  EXPECT_EQ(io::crc32c_copy(std::vector<char>(9).data(), "123456789", 9), 0xE3069283u);
  for (const size_t size : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{98303}, size_t{98304}, size_t{98305},
                            size_t{3 * 98304 + 13}, size_t{1} << 20}) {
    for (const size_t offset : {size_t{0}, size_t{3}}) {
      std::vector<unsigned char> copy(size + 5, 0xAB);
      const uint32_t previous = 0x12345678u;
      EXPECT_EQ(io::crc32c_copy(copy.data() + 1, data.data() + offset, size, previous),
                io::crc32c(data.data() + offset, size, previous))
          << size << " bytes from offset " << offset;
      EXPECT_EQ(std::memcmp(copy.data() + 1, data.data() + offset, size), 0) << size << " bytes from offset " << offset;
      EXPECT_EQ(copy[0], 0xAB);  // nothing written outside the destination
      EXPECT_EQ(copy[size + 1], 0xAB);
    }
  }
}

// Reader threads, and whether the file is read from the page cache (a mapping, copied and
// checksummed in one pass) or from the drive (pread, checked behind the reads).
class RankFile : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  int threads() const { return std::get<0>(GetParam()); }
  bool from_drive() const { return std::get<1>(GetParam()); }
  // Drops the file's (clean, fsynced) pages when the test reads from the drive.
  void prepare(const fs::path& path) const {
    if (!from_drive()) return;
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  // Skips when the pages could not be dropped (tmpfs keeps them) or the kernel cannot say.
  bool reads_as_intended(const io::RankFileReader& reader) const {
    return reader.reads_from_page_cache() == !from_drive();
  }
};

TEST_P(RankFile, ReadsBackWholeAndInSlices) {
  const auto dir = scratch_dir("slices");
  // 5.5 blocks of 4 MiB, so that slices cut blocks at both ends; a small int64 and a u8 set.
  const uint64_t count = (uint64_t{22} << 20) / 4 + 3;
  std::vector<float> values(count);
  for (uint64_t i = 0; i < count; ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const int64_t steps = 41;
  const std::vector<uint8_t> bytes{1, 2, 3, 250};
  const auto written = io::write_rank_file(dir / "r.h5", {{"layers/00000/master", io::ElementType::f32, values.data(), count},
                                                        {"layers/00000/steps", io::ElementType::i64, &steps, 1},
                                                        {"rng_state", io::ElementType::u8, bytes.data(), bytes.size()}});
  EXPECT_EQ(written.bytes, fs::file_size(dir / "r.h5"));
  EXPECT_EQ(written.crc32c, io::file_crc32c(dir / "r.h5"));

  prepare(dir / "r.h5");
  io::RankFileReader reader(dir / "r.h5", threads());
  if (!reads_as_intended(reader)) GTEST_SKIP() << "the file's pages could not be dropped from the cache here";
  EXPECT_EQ(reader.count("layers/00000/master"), count);
  std::vector<float> out(count, -1.0f);
  reader.read("layers/00000/master", 0, count, out.data());
  EXPECT_EQ(0, std::memcmp(out.data(), values.data(), count * 4));
  for (auto [begin, length] : {std::pair<uint64_t, uint64_t>{1, 10}, {(1u << 20) - 2, 5}, {12345, (3u << 20) + 77},
                               {count - 9, 9}, {(2u << 20), (1u << 20)}, {7, count - 7}}) {
    std::vector<float> slice(length, -1.0f);
    reader.read("layers/00000/master", begin, length, slice.data());
    EXPECT_EQ(0, std::memcmp(slice.data(), values.data() + begin, length * 4)) << begin << " +" << length;
  }
  int64_t steps_read = 0;
  reader.read("layers/00000/steps", 0, 1, &steps_read);
  EXPECT_EQ(steps_read, 41);
  std::vector<uint8_t> bytes_read(4);
  reader.read("rng_state", 0, 4, bytes_read.data());
  EXPECT_EQ(bytes_read, bytes);
  EXPECT_THROW(reader.read("layers/00000/master", count - 1, 2, out.data()), superoffload::Error);

  // Any HDF5 reader reads it as an ordinary dataset.
  const auto file = io::Hdf5File::open_read((dir / "r.h5").string());
  EXPECT_EQ(file.read_float("layers/00000/master").values, values);
  fs::remove_all(dir);
}

// Bytes this process has had the block layer fetch from storage (/proc/self/io read_bytes);
// nullopt where the kernel does not account them.
std::optional<uint64_t> storage_read_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "read_bytes:") return value;
  }
  return std::nullopt;
}

// [checkpoint] verify_from_disk: the read-back comes from the drive (the pages are dropped after
// fsync), so the process reads the whole file from storage; page_cache reads none of it there.
TEST(RankFileReadBack, FromTheDeviceReadsTheDrive) {
  const auto dir = scratch_dir("device");
  struct statfs fs_info {};
  if (statfs(dir.c_str(), &fs_info) != 0 || fs_info.f_type == TMPFS_MAGIC || fs_info.f_type == OVERLAYFS_SUPER_MAGIC ||
      !storage_read_bytes()) {
    fs::remove_all(dir);
    GTEST_SKIP() << dir << " is not on a block device whose reads this process can count";
  }
  const uint64_t count = uint64_t{16} << 20;  // 64 MiB
  std::vector<float> values(count, 1.5f);
  const std::vector<io::DatasetSource> datasets{{"layers/00000/master", io::ElementType::f32, values.data(), count}};
  const uint64_t before_cache = *storage_read_bytes();
  io::write_rank_file(dir / "cached.h5", datasets);
  const uint64_t from_cache = *storage_read_bytes() - before_cache;
  const uint64_t before_device = *storage_read_bytes();
  const auto written = io::write_rank_file(dir / "device.h5", datasets, nullptr, io::ReadBack::device);
  const uint64_t from_device = *storage_read_bytes() - before_device;
  EXPECT_EQ(written.crc32c, io::file_crc32c(dir / "device.h5"));
  EXPECT_GE(from_device, written.bytes * 9 / 10) << "read from storage: " << from_device << " of " << written.bytes;
  EXPECT_LT(from_cache, written.bytes / 10) << "the page-cache read-back read " << from_cache << " bytes from storage";
  fs::remove_all(dir);
}

TEST_P(RankFile, CorruptionIsNamedWithTheDatasetAndBytes) {
  const auto dir = scratch_dir("corrupt");
  const uint64_t count = (uint64_t{9} << 20) / 4;  // 2.25 blocks
  std::vector<float> values(count, 1.25f);
  io::write_rank_file(dir / "r.h5", {{"layers/00002/exp_avg", io::ElementType::f32, values.data(), count}});
  uint64_t offset = 0;
  {
    const auto file = io::Hdf5File::open_read((dir / "r.h5").string());
    offset = file.contiguous_extent("layers/00002/exp_avg").offset;
  }
  {
    std::fstream f(dir / "r.h5", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset + (uint64_t{5} << 20) + 3));  // in the second block
    f.put('\x5a');
  }
  prepare(dir / "r.h5");
  io::RankFileReader reader(dir / "r.h5", threads());
  if (!reads_as_intended(reader)) GTEST_SKIP() << "the file's pages could not be dropped from the cache here";
  std::vector<float> out(count);
  try {
    reader.read("layers/00002/exp_avg", 0, count, out.data());
    FAIL() << "a flipped byte was not noticed";
  } catch (const superoffload::Error& e) {
    EXPECT_NE(std::string(e.what()).find("dataset \"layers/00002/exp_avg\" fails its CRC32C check in bytes [4194304, 8388608)"),
              std::string::npos)
        << e.what();
  }
  // The first block is still good on its own.
  reader.read("layers/00002/exp_avg", 0, 1000, out.data());
  EXPECT_EQ(out[999], 1.25f);
  fs::remove_all(dir);
}

// A file cut short under an open reader: the mapped read meets pages past the end (SIGBUS),
// which must become an error naming the file, not the end of the process.
TEST_P(RankFile, AFileTruncatedUnderTheReaderIsAnErrorNotASignal) {
  const auto dir = scratch_dir("truncated");
  const uint64_t count = (uint64_t{12} << 20) / 4;  // 3 blocks
  std::vector<float> values(count, 2.5f);
  io::write_rank_file(dir / "r.h5", {{"layers/00000/master", io::ElementType::f32, values.data(), count}});
  uint64_t offset = 0;
  {
    const auto file = io::Hdf5File::open_read((dir / "r.h5").string());
    offset = file.contiguous_extent("layers/00000/master").offset;
  }
  prepare(dir / "r.h5");
  io::RankFileReader reader(dir / "r.h5", threads());
  if (!reads_as_intended(reader)) GTEST_SKIP() << "the file's pages could not be dropped from the cache here";
  fs::resize_file(dir / "r.h5", offset + (uint64_t{5} << 20) + 100);  // in the second block
  std::vector<float> out(count);
  try {
    reader.read("layers/00000/master", 0, count, out.data());
    FAIL() << "a read past the end of the file succeeded";
  } catch (const superoffload::Error& e) {
    EXPECT_NE(std::string(e.what()).find("r.h5 ends at byte"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndCache, RankFile, ::testing::Combine(::testing::Values(1, 3), ::testing::Bool()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "_threads_" +
                                  (std::get<1>(info.param) ? "from_drive" : "from_cache");
                         });
