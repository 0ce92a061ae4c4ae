// A ZeRO rank's shard read straight from bf16 safetensors (load_layer_ranges): a layer's pieces
// are widened in one pass split over all their elements and the rank's threads, so a thread's
// part starts and ends inside pieces, and a piece's NaN/inf are counted from both threads'
// parts. The block here (10.5 Mi elements), and the shard cut from it, are large enough to be
// split over 2 threads (a thread per 4 Mi elements).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "cluster/compute_threads.hpp"
#include "model_io/load_model.hpp"
#include "model_io/safetensors.hpp"

namespace so = superoffload;
namespace m = so::model;

namespace {

// The stored bf16 bits of element i of tensor t: distinct, finite, and varied in sign and scale.
uint16_t stored_bits(size_t t, int64_t i) {
  const float value = static_cast<float>((i * 7 + static_cast<int64_t>(t) * 131) % 2001 - 1000) / 1024.0f;
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return static_cast<uint16_t>(bits >> 16);  // exact: value has at most 8 significant bits
}

class WeightsByShard : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { so::log::init(so::log::Level::warning); }
  void SetUp() override {
    so::cluster::set_compute_threads(2);  // whatever this machine has: the split is what is tested
    dir_ = std::filesystem::temp_directory_path() / ("so_weights_by_shard_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 64,
      "hidden_size": 512, "intermediate_size": 6144, "num_hidden_layers": 1, "num_attention_heads": 8,
      "num_key_value_heads": 8, "tie_word_embeddings": false})";
    const auto model = m::load_model(dir_.string(), "auto", so::config::InitMode::random, 3).model;
    for (const auto& layer : model->layers()) {
      for (const auto& [name, tensor] : layer->hf_parameters()) {
        Stored s{name, tensor.sizes().vec(), std::vector<uint16_t>(static_cast<size_t>(tensor.numel()))};
        for (int64_t i = 0; i < tensor.numel(); ++i) s.bits[static_cast<size_t>(i)] = stored_bits(stored_.size(), i);
        stored_.push_back(std::move(s));
      }
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write() {
    std::vector<m::TensorToWrite> out;
    for (const auto& s : stored_) out.push_back({s.name, m::DType::BF16, s.shape, s.bits.data()});
    m::write_safetensors(dir_ / "model.safetensors", out);
  }
  struct Stored {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<uint16_t> bits;
  };
  std::filesystem::path dir_;
  std::vector<Stored> stored_;
};

}  // namespace

TEST_F(WeightsByShard, PiecesAcrossThreadsAndParametersReadExactly) {
  write();
  auto loaded = m::load_model(dir_.string(), "auto", so::config::InitMode::pretrained, 0, /*defer=*/true);
  ASSERT_TRUE(loaded.fill_ranges);
  // The block (layer 1): a shard of the middle of its flat layout, cut inside parameters.
  const size_t block = 1;
  const auto parameters = loaded.model->layers()[block]->hf_parameters();
  int64_t total = 0;
  std::vector<int64_t> offsets;
  for (const auto& [name, tensor] : parameters) {
    offsets.push_back(total);
    total += tensor.numel();
  }
  const int64_t begin = total / 50, end = total - total / 40;
  ASSERT_GT(end - begin, int64_t{1} << 23) << "the shard must be split over two threads";
  std::vector<float> shard(static_cast<size_t>(end - begin), -1.0f);
  std::vector<m::WeightRange> ranges;
  std::vector<size_t> stored_index;  // of each range's parameter in stored_
  for (size_t p = 0; p < parameters.size(); ++p) {
    const int64_t from = std::max(begin, offsets[p]), to = std::min(end, offsets[p] + parameters[p].second.numel());
    if (from >= to) continue;
    ranges.push_back({p, from - offsets[p], to - from, shard.data() + (from - begin)});
    for (size_t s = 0; s < stored_.size(); ++s) {
      if (stored_[s].name == parameters[p].first) stored_index.push_back(s);
    }
  }
  ASSERT_GE(ranges.size(), 3u);
  ASSERT_EQ(stored_index.size(), ranges.size());
  loaded.fill_ranges(block, ranges);
  int64_t wrong = 0;
  for (size_t r = 0; r < ranges.size(); ++r) {
    const auto& bits = stored_[stored_index[r]].bits;
    for (int64_t i = 0; i < ranges[r].numel; ++i) {
      const uint32_t expected = static_cast<uint32_t>(bits[static_cast<size_t>(ranges[r].begin + i)]) << 16;
      uint32_t got;
      std::memcpy(&got, ranges[r].into + i, 4);
      wrong += got != expected;
    }
  }
  EXPECT_EQ(wrong, 0) << "elements of the shard not equal to their stored bf16 values";
}

TEST_F(WeightsByShard, NonFiniteValuesAreCountedPerTensorAcrossThreads) {
  // down_proj (the block's last and largest parameter) gets NaNs near both ends: the threads'
  // split of the layer falls inside it, so each thread counts some of them.
  for (auto& s : stored_) {
    if (s.name.find("down_proj") == std::string::npos) continue;
    const int64_t n = static_cast<int64_t>(s.bits.size());
    for (const int64_t i : {int64_t{5}, int64_t{6}, n - 3}) s.bits[static_cast<size_t>(i)] = 0x7fc0;  // NaN
    s.bits[static_cast<size_t>(n / 2)] = 0xff80;  // -inf
  }
  write();
  auto loaded = m::load_model(dir_.string(), "auto", so::config::InitMode::pretrained, 0, /*defer=*/true);
  const auto parameters = loaded.model->layers()[1]->hf_parameters();
  std::vector<m::WeightRange> ranges;
  std::vector<std::vector<float>> buffers;
  for (size_t p = 0; p < parameters.size(); ++p) buffers.emplace_back(static_cast<size_t>(parameters[p].second.numel()));
  for (size_t p = 0; p < parameters.size(); ++p) {
    ranges.push_back({p, 0, parameters[p].second.numel(), buffers[p].data()});
  }
  try {
    loaded.fill_ranges(1, ranges);
    FAIL() << "weights holding NaN and inf were accepted";
  } catch (const so::Error& e) {
    EXPECT_NE(std::string(e.what()).find("down_proj.weight\" holds 4 non-finite value(s)"), std::string::npos) << e.what();
  }
}
