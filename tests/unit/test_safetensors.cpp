// safetensors: write → read is bitwise identical (single file and sharded with an index),
// and every kind of damaged file is refused with a one-line message naming file and problem.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "base/error.hpp"
#include "model_io/safetensors.hpp"

namespace m = superoffload::model;
namespace fs = std::filesystem;

namespace {

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("so_st_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    a_.resize(6);
    std::iota(a_.begin(), a_.end(), 0.5f);
    b_ = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<m::TensorToWrite> tensors() {
    return {{"model.a", m::DType::F32, {2, 3}, a_.data()}, {"model.b", m::DType::BF16, {13}, b_.data()}};
  }
  // Raw bytes of a file, to damage them.
  std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }
  std::string error_opening(const fs::path& p) {
    try {
      m::SafetensorsFile::open(p);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
      EXPECT_NE(what.find(p.string()), std::string::npos) << what;
      return what;
    }
    ADD_FAILURE() << "expected an error for " << p;
    return "";
  }
  // A file with the given header JSON and `data_bytes` zero bytes of data.
  fs::path with_header(const std::string& header, size_t data_bytes) {
    std::string bytes(8, '\0');
    const uint64_t size = header.size();
    std::memcpy(bytes.data(), &size, 8);
    bytes += header + std::string(data_bytes, '\0');
    const auto p = dir_ / "crafted.safetensors";
    write(p, bytes);
    return p;
  }

  fs::path dir_;
  std::vector<float> a_;
  std::vector<uint16_t> b_;
};

TEST_F(Safetensors, RoundTripIsBitwiseIdentical) {
  const auto p = dir_ / "x.safetensors";
  m::write_safetensors(p, tensors());
  const auto file = m::SafetensorsFile::open(p);
  ASSERT_EQ(file->tensors().size(), 2u);
  const auto* a = file->find("model.a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, m::DType::F32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(a->data, a_.data(), a->bytes), 0);
  const auto* b = file->find("model.b");
  EXPECT_EQ(b->bytes, 26u);
  EXPECT_EQ(std::memcmp(b->data, b_.data(), b->bytes), 0);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
}

TEST_F(Safetensors, ShardedExportWithIndexReadsBack) {
  std::vector<std::vector<float>> data;
  std::vector<m::TensorToWrite> plan;
  for (int i = 0; i < 5; ++i) {
    data.emplace_back(10, static_cast<float>(i));  // 40 bytes each: two per shard
    plan.push_back({"layer." + std::to_string(i) + ".weight", m::DType::F32, {10}, data.back().data()});
  }
  m::ShardedSafetensorsWriter writer(dir_ / "hf", /*max_shard_bytes=*/100, plan);
  for (const auto& tensor : plan) {
    writer.add(tensor);
    data[&tensor - plan.data()].assign(10, -1.0f);  // written at once: the caller's memory is free again
  }
  // Out of plan: refused, naming the tensor.
  m::ShardedSafetensorsWriter other(dir_ / "other", 100, plan);
  try {
    other.add(plan[1]);
    ADD_FAILURE() << "a tensor out of the planned order was written";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("layer.1.weight comes where layer.0.weight was planned"), std::string::npos)
        << e.what();
  }
  writer.finish();
  EXPECT_TRUE(fs::exists(dir_ / "hf" / "model-00001-of-00003.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "hf" / "model-00003-of-00003.safetensors"));
  auto checkpoint = m::SafetensorsCheckpoint::open(dir_ / "hf");
  EXPECT_EQ(checkpoint.names().size(), 5u);
  for (int i = 0; i < 5; ++i) {
    const auto& view = checkpoint.get("layer." + std::to_string(i) + ".weight");
    const std::vector<float> expected(10, static_cast<float>(i));  // the values when added
    EXPECT_EQ(std::memcmp(view.data, expected.data(), 40), 0);
  }
  const auto index = nlohmann::json::parse(read(dir_ / "hf" / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<int>(), 200);
}

// The index may only name files in its directory: an absolute path used to be opened (and its
// first bytes printed in the error).
TEST_F(Safetensors, IndexShardNamesStayInTheDirectory) {
  fs::create_directories(dir_ / "hf");
  for (const std::string shard : {"/etc/passwd", "../outside.safetensors", "sub/dir.safetensors", "..", ""}) {
    std::ofstream(dir_ / "hf" / "model.safetensors.index.json")
        << nlohmann::json{{"weight_map", {{"model.a", shard}}}}.dump();
    try {
      m::SafetensorsCheckpoint::open(dir_ / "hf");
      ADD_FAILURE() << "shard name " << shard << " was accepted";
    } catch (const superoffload::Error& e) {
      EXPECT_NE(std::string(e.what()).find("weight_map[\"model.a\"] = \"" + shard + "\" is not the name of a file in"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_F(Safetensors, TruncatedFileIsRefused) {
  const auto p = dir_ / "x.safetensors";
  m::write_safetensors(p, tensors());
  auto bytes = read(p);
  write(p, bytes.substr(0, bytes.size() - 10));
  EXPECT_NE(error_opening(p).find("(file truncated?)"), std::string::npos);
  write(p, bytes.substr(0, 20));
  EXPECT_NE(error_opening(p).find("runs past the end"), std::string::npos);
  write(p, bytes.substr(0, 5));
  EXPECT_NE(error_opening(p).find("shorter than the 8-byte header length"), std::string::npos);
}

TEST_F(Safetensors, CorruptHeaderIsRefused) {
  const auto p = dir_ / "x.safetensors";
  m::write_safetensors(p, tensors());
  auto bytes = read(p);
  bytes[12] = '\x01';  // inside the JSON header
  write(p, bytes);
  EXPECT_NE(error_opening(p).find("not valid JSON"), std::string::npos);
}

TEST_F(Safetensors, InconsistentEntriesAreRefused) {
  EXPECT_NE(error_opening(with_header(R"({"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8))
                .find("unknown dtype F33"),
            std::string::npos);
  EXPECT_NE(error_opening(with_header(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8))
                .find("holds 8 bytes but its shape and F32 need 12"),
            std::string::npos);
  EXPECT_NE(error_opening(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                      12))
                .find("overlap"),
            std::string::npos);
  EXPECT_NE(error_opening(with_header(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8))
                .find("negative"),
            std::string::npos);
  EXPECT_NE(error_opening(with_header(R"({"t":{"dtype":"F32","shape":[2]}})", 8)).find("lacks"), std::string::npos);
}

TEST(ByteSize, ParsesHuggingFaceUnits) {
  EXPECT_EQ(m::parse_byte_size("5GB"), 5'000'000'000u);
  EXPECT_EQ(m::parse_byte_size("500MB"), 500'000'000u);
  EXPECT_EQ(m::parse_byte_size("2GiB"), 2ull << 30);
  EXPECT_EQ(m::parse_byte_size("1000"), 1000u);
  EXPECT_THROW(m::parse_byte_size("5 parsecs"), superoffload::Error);
}

}  // namespace
