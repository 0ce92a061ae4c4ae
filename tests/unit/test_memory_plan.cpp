// The memory plan (train/memory_plan.hpp) for the seven reference jobs of DeepSpeed's
// SuperOffload examples, from the config.json files shipped under configs/models/: each fits
// its GH200 count (96 GB GPU, 480 GB host per GPU) with the plan's headroom; the CPU share of
// the gradient is not on the device; the bucket term follows reduce_bucket_size; and a GPU
// without room is refused with what would make the run fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "config/load.hpp"
#include "train/memory_plan.hpp"

namespace so = superoffload;
namespace t = superoffload::train;

namespace {

const std::string kSource = SUPEROFFLOAD_SOURCE_DIR;

struct Job {
  so::config::Config config;
  t::ModelSize size;
};

Job job(const std::string& name, int gpus, std::vector<std::string> overrides = {}) {
  overrides.push_back("model.path=" + kSource + "/configs/models/" + name);
  const auto loaded =
      so::config::load_config({kSource + "/configs/reference-models/" + name + ".toml", std::nullopt, overrides}, gpus);
  return {loaded.config, t::model_size_from_config(loaded.config.model.path)};
}

constexpr double kGH200Device = 96e9, kGH200HostPerGpu = 480e9;

TEST(MemoryPlan, ReferenceJobsFitTheirGH200s) {
  const std::pair<const char*, int> jobs[] = {{"llama-3.1-8b", 1}, {"qwen3-14b", 1},     {"phi-4", 1},
                                              {"gpt-oss-20b", 1},  {"seed-oss-36b", 2},  {"qwen3-30b-a3b", 2},
                                              {"llama-3.3-70b", 4}};
  for (const auto& [name, gpus] : jobs) {
    const auto j = job(name, gpus);
    const auto plan = t::plan_memory(j.size, j.config, gpus, true);
    EXPECT_LE(plan.device_total(), t::kPlanHeadroom * kGH200Device) << name << " on " << gpus << " GH200";
    EXPECT_LE(plan.host_total() * gpus, t::kPlanHeadroom * kGH200HostPerGpu * gpus) << name;
    EXPECT_GT(plan.device_activation_bytes, 0) << name;
    EXPECT_GT(plan.device_reduce_bytes, 0) << name;
  }
}

TEST(MemoryPlan, TheCpuShareOfTheGradientIsNotOnTheDevice) {
  const auto j = job("llama-3.3-70b", 4);
  const double per_rank = static_cast<double>(j.size.parameters) / 4;
  EXPECT_NEAR(j.size.parameters / 1e9, 70.55, 0.01);
  const auto plan = t::plan_memory(j.size, j.config, 4, true);  // ratio 0.95
  EXPECT_NEAR(plan.device_gradient_bytes, 4 * per_rank * (1 - j.config.offload.ratio), 1e3);
  EXPECT_NEAR(plan.device_optimizer_bytes, 12 * per_rank * (1 - j.config.offload.ratio), 1e3);
  auto all_cpu = j.config;
  all_cpu.offload.ratio = 1.0;
  const auto offloaded = t::plan_memory(j.size, all_cpu, 4, true);
  EXPECT_EQ(offloaded.device_gradient_bytes, 0);
  EXPECT_EQ(offloaded.device_optimizer_bytes, 0);
  // The gradient moved to the host, with the rest of the CPU share's state.
  EXPECT_GT(offloaded.host_optimizer_bytes, plan.host_optimizer_bytes);
  auto on_device = j.config;
  on_device.offload.device = so::config::OffloadDevice::none;
  EXPECT_NEAR(t::plan_memory(j.size, on_device, 4, true).device_gradient_bytes, 4 * per_rank, 1e3);
}

TEST(MemoryPlan, BucketsFollowReduceBucketSize) {
  auto j = job("llama-3.3-70b", 4);
  const auto big = t::plan_memory(j.size, j.config, 4, true);
  j.config.zero.reduce_bucket_size = 100'000'000;
  const auto small = t::plan_memory(j.size, j.config, 4, true);
  // Two chunks in flight: a bucket of send buffer and a bucket / ranks of staging each.
  EXPECT_NEAR(big.device_reduce_bytes - small.device_reduce_bytes, 4 * 2 * 3e8 * 1.25, 1e3);
}

TEST(MemoryPlan, ActivationOffloadMovesTheSavedInputsToPinnedHostMemory) {
  // Llama-3.1-8B at 128k tokens: each of the 32 layers' inputs is 128k x 4096 bf16 = 1 GiB.
  auto j = job("llama-3.1-8b", 1, {"data.seq_len=131072", "training.train_micro_batch_size_per_gpu=1"});
  const auto kept = t::plan_memory(j.size, j.config, 1, true);
  j.config.model.activation_offload = so::config::ActivationOffload::host;
  const auto offloaded = t::plan_memory(j.size, j.config, 1, true);
  const double per_layer = 131072.0 * 4096 * 2;
  EXPECT_NEAR(offloaded.host_activation_bytes, 32 * per_layer, 1e3);
  EXPECT_NEAR(kept.device_activation_bytes - offloaded.device_activation_bytes, 30 * per_layer, 1e3)
      << "two layers' inputs stay on the device: the one in flight and the one fetched ahead";
  EXPECT_NEAR(offloaded.host_total() - kept.host_total(), 32 * per_layer, 1e3);
  bool copy_time = false;
  for (const auto& line : t::describe_plan(j.size, offloaded, 1, 0, 0)) {
    copy_time |= line.find("activation offload: 64.0 GiB over the host link per micro-batch") != std::string::npos &&
                 line.find("ms at a GH200's 450 GB/s") != std::string::npos;
  }
  EXPECT_TRUE(copy_time) << "the plan states the copies and their time against the link";
}

TEST(MemoryPlan, AResumeCountsItsLayerBufferWhenTheRunSavesNothing) {
  // Llama-3.1-8B's largest layer is its head (lm_head 128256 x 4096 and the final norm's 4096).
  // Set-up alone draws or reads it in fp32 (4 bytes a parameter); a resume reads master and
  // moments of the largest shard into one buffer (12 bytes a parameter over the ranks), as a
  // save exports them.
  auto j = job("llama-3.1-8b", 1, {"checkpoint.save_on_exit=false", "checkpoint.every_steps=0"});
  const double largest = 128256.0 * 4096 + 4096;
  for (const int ranks : {1, 2, 4}) {
    const auto fresh = t::plan_memory(j.size, j.config, ranks, true);
    const auto resumed = t::plan_memory(j.size, j.config, ranks, true, /*resumes=*/true);
    EXPECT_NEAR(fresh.host_setup_bytes, 4 * largest, 1e3) << ranks << " rank(s)";
    EXPECT_NEAR(resumed.host_setup_bytes, std::max(4.0, 12.0 / ranks) * largest, 1e3) << ranks << " rank(s)";
  }
  auto saving = job("llama-3.1-8b", 1, {"checkpoint.save_on_exit=true"});
  EXPECT_EQ(t::plan_memory(saving.size, saving.config, 1, true).host_setup_bytes,
            t::plan_memory(saving.size, saving.config, 1, true, /*resumes=*/true).host_setup_bytes)
      << "a run that saves counts the layer buffer already";
}

TEST(MemoryPlan, AGpuWithoutRoomIsRefusedWithWhatWouldFit) {
  auto j = job("llama-3.3-70b", 4, {"offload.ratio=0.9"});
  const double free = 94e9;  // a GH200 after the CUDA context
  const auto refusal = t::refuse_device_memory(j.size, j.config, 4, "cuda:0", free, 96e9);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_NE(refusal->message.find("GB on cuda:0"), std::string::npos) << refusal->message;
  EXPECT_NE(refusal->message.find("94 GB of 96 GB free"), std::string::npos) << refusal->message;
  EXPECT_NE(refusal->fix.find("run on 8 GPUs"), std::string::npos) << refusal->fix;
  EXPECT_NE(refusal->fix.find("raise [offload] ratio to 0.95"), std::string::npos) << refusal->fix;
  EXPECT_NE(refusal->fix.find("train_micro_batch_size_per_gpu to"), std::string::npos) << refusal->fix;
  // The shipped setting (ratio 0.95) starts.
  const auto shipped = job("llama-3.3-70b", 4);
  EXPECT_FALSE(t::refuse_device_memory(shipped.size, shipped.config, 4, "cuda:0", free, 96e9).has_value());
}

}  // namespace
