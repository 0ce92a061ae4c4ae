// base::parallel_ranges runs its ranges at the same time on as many threads as asked, covers
// every index once, and rethrows a range's exception; parallel_sum is exact for integers, and
// count_non_finite, on it, counts NaN and ±inf and nothing else. Random
// initialisation, which runs on it, draws the same values on 1 thread as on 4, and a rank's
// ranges of a layer (init_layer_ranges: its shard) the same values as the whole layer.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>
#include <unistd.h>

#include "base/logging.hpp"
#include "base/non_finite.hpp"
#include "base/parallel_ranges.hpp"
#include "model_io/load_model.hpp"
#include "model_io/random_init.hpp"

namespace so = superoffload;

namespace {

TEST(ParallelRanges, CoversEveryIndexOnce) {
  for (const auto& [n, threads] : {std::pair{0, 4}, {1, 4}, {7, 16}, {1000, 3}, {1001, 1}, {64, 64}}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    so::base::parallel_ranges(n, threads, [&](int64_t begin, int64_t end) {
      ASSERT_LE(0, begin);
      ASSERT_LT(begin, end);
      for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " index " << i;
  }
}

TEST(ParallelRanges, RangesRunAtTheSameTimeOnDistinctThreads) {
  // Each range waits until every range has started: on fewer threads than ranges this never
  // happens (the wait gives up after 10 s and the test fails rather than hangs).
  constexpr int kThreads = 4;
  std::atomic<int> started{0};
  std::atomic<bool> all_met{true};
  std::mutex mutex;
  std::set<std::thread::id> ids;
  so::base::parallel_ranges(kThreads, kThreads, [&](int64_t, int64_t) {
    {
      const std::lock_guard lock(mutex);
      ids.insert(std::this_thread::get_id());
    }
    started++;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < kThreads) {
      if (std::chrono::steady_clock::now() > deadline) {
        all_met = false;
        return;
      }
      std::this_thread::yield();
    }
  });
  EXPECT_TRUE(all_met) << "the ranges did not run concurrently";
  EXPECT_EQ(ids.size(), static_cast<size_t>(kThreads));
  EXPECT_TRUE(ids.count(std::this_thread::get_id())) << "the caller takes a range itself";
}

TEST(ParallelRanges, RethrowsAfterEveryRangeEnded) {
  std::atomic<int> finished{0};
  EXPECT_THROW(so::base::parallel_ranges(8, 8,
                                         [&](int64_t begin, int64_t) {
                                           if (begin == 3) throw std::runtime_error("range 3");
                                           std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                           finished++;
                                         }),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 7);
}

TEST(ParallelRanges, IntegerSumIsExactAndThreadCountsAreBounded) {
  const int64_t n = 1'000'003;
  for (int threads : {1, 2, 5, 16}) {
    const auto sum = so::base::parallel_sum<int64_t>(n, threads, [](int64_t begin, int64_t end) {
      int64_t s = 0;
      for (int64_t i = begin; i < end; ++i) s += i;
      return s;
    });
    EXPECT_EQ(sum, n * (n - 1) / 2) << threads << " threads";
  }
  EXPECT_EQ(so::base::threads_for(100, 1 << 22, 16), 1);
  EXPECT_EQ(so::base::threads_for(int64_t{3} << 22, 1 << 22, 16), 3);
  EXPECT_EQ(so::base::threads_for(int64_t{100} << 22, 1 << 22, 16), 16);
}

TEST(NonFinite, CountsNanAndBothInfinitiesOnlyOnAnyThreadCount) {
  std::vector<float> values(100'003, 1.0f);
  const float finite_edges[] = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                                std::numeric_limits<float>::denorm_min(), -0.0f, 0.0f};
  for (size_t i = 0; i < std::size(finite_edges); ++i) values[10 * i] = finite_edges[i];
  EXPECT_EQ(so::base::count_non_finite(values.data(), static_cast<int64_t>(values.size()), 3), 0);
  values[0] = std::numeric_limits<float>::quiet_NaN();
  values[50'001] = std::numeric_limits<float>::infinity();
  values[values.size() - 1] = -std::numeric_limits<float>::infinity();
  values[77] = -std::numeric_limits<float>::signaling_NaN();
  for (int threads : {1, 2, 7}) {
    EXPECT_EQ(so::base::count_non_finite(values.data(), static_cast<int64_t>(values.size()), threads), 4)
        << threads << " threads";
  }
  EXPECT_EQ(so::base::count_non_finite(values.data() + 1, 50'000, 2), 1) << "the signalling NaN at 77 only";
}

// A Llama config whose embedding spans three initialisation blocks (9,000 × 1,024 > 2 × 4 Mi
// elements), with a padding row (5), in a directory of its own.
std::filesystem::path llama_directory(const std::string& tag) {
  so::log::init(so::log::Level::warning);
  const auto dir = std::filesystem::temp_directory_path() / ("so_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 9000,
    "hidden_size": 1024, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 8,
    "num_key_value_heads": 8, "pad_token_id": 5})";
  return dir;
}

TEST(RandomInitialisation, SameValuesOnOneThreadAsOnFour) {
  const auto dir = llama_directory("parallel_init");
  auto values = [&](int threads) {
    at::set_num_threads(threads);
    const auto model = so::model::load_model(dir.string(), "auto", so::config::InitMode::random, 11).model;
    std::vector<at::Tensor> out;
    for (const auto& layer : model->layers()) {
      for (const auto& [name, tensor] : layer->hf_parameters()) out.push_back(tensor.detach().clone());
    }
    return out;
  };
  const auto one = values(1), four = values(4);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(one.size(), four.size());
  ASSERT_GT(one.front().numel(), 2 * (int64_t{1} << 22));
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(at::equal(one[i], four[i])) << "tensor " << i;
  EXPECT_GT(one.front().std().item<double>(), 0.0);
}

// Ranges across block boundaries, single elements, the padding row's edges and whole tensors,
// drawn for the embedding, a decoder layer and the head.
TEST(RandomInitialisation, RangesEqualTheWholeLayer) {
  const auto dir = llama_directory("range_init");
  at::set_num_threads(3);
  const auto whole = so::model::load_model(dir.string(), "auto", so::config::InitMode::random, 11).model;
  auto deferred = so::model::load_model(dir.string(), "auto", so::config::InitMode::random, 11, /*defer=*/true);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(deferred.fill_ranges) << "random initialisation fills ranges";
  const int64_t block = int64_t{1} << 22;
  int64_t checked = 0;
  for (size_t l = 0; l < whole->layers().size(); ++l) {
    const auto expected = whole->layers()[l]->hf_parameters();
    std::vector<std::pair<int64_t, int64_t>> spans;  // per parameter: begin, numel
    std::vector<so::model::WeightRange> ranges;
    std::vector<std::vector<float>> buffers;
    for (size_t p = 0; p < expected.size(); ++p) {
      const int64_t n = expected[p].second.numel();
      for (auto [begin, numel] : {std::pair<int64_t, int64_t>{0, n}, {n - 1, 1}, {n / 3, n / 3},
                                  {block - 100, 200}, {2 * block - 1, 2}, {5 * 1024 - 3, 1030}}) {
        if (begin < 0 || numel <= 0 || begin + numel > n) continue;
        buffers.emplace_back(static_cast<size_t>(numel), -7.0f);
        ranges.push_back({p, begin, numel, nullptr});
      }
    }
    for (size_t r = 0; r < ranges.size(); ++r) ranges[r].into = buffers[r].data();
    deferred.fill_ranges(l, ranges);
    for (size_t r = 0; r < ranges.size(); ++r) {
      const auto want = expected[ranges[r].parameter].second.detach().reshape({-1}).narrow(0, ranges[r].begin, ranges[r].numel);
      const auto got = at::from_blob(buffers[r].data(), {ranges[r].numel}, at::kFloat);
      EXPECT_TRUE(at::equal(want, got)) << "layer " << l << " " << expected[ranges[r].parameter].first << " ["
                                        << ranges[r].begin << ", +" << ranges[r].numel << ")";
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
  // The padding row is zero in both.
  EXPECT_EQ(whole->layers()[0]->hf_parameters()[0].second[5].abs().sum().item<double>(), 0.0);
}

// The values are a contract (a run restarted without a checkpoint draws the model it drew
// before): a weight's first block is N(0, initializer_range) from a generator seeded by the
// seed xor the FNV-1a hash of its HF name; norms are 1, and a tensor of one block is that draw.
TEST(RandomInitialisation, AWeightIsDrawnFromItsNamesSeed) {
  const auto dir = llama_directory("seeded_init");
  const auto model = so::model::load_model(dir.string(), "auto", so::config::InitMode::random, 11).model;
  std::filesystem::remove_all(dir);
  auto fnv1a = [](const std::string& text) {
    uint64_t hash = 1469598103934665603ull;
    for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
    return hash;
  };
  int weights = 0;
  for (const auto& layer : model->layers()) {
    for (const auto& [name, tensor] : layer->hf_parameters()) {
      const auto flat = tensor.detach().reshape({-1});
      if (name.find("norm") != std::string::npos) {
        EXPECT_TRUE(at::equal(flat, at::ones_like(flat))) << name;
        continue;
      }
      if (name == "model.embed_tokens.weight") continue;  // its padding row is 0
      const int64_t first = std::min<int64_t>(flat.numel(), int64_t{1} << 22);
      const auto expected = at::empty({first}).normal_(0.0, model->initializer_range(),
                                                         at::make_generator<at::CPUGeneratorImpl>(11 ^ fnv1a(name)));
      EXPECT_TRUE(at::equal(flat.narrow(0, 0, first), expected)) << name;
      ++weights;
    }
  }
  EXPECT_GE(weights, 7);
}

}  // namespace
