// What one micro-batch's forward and backward hold, counted allocation by allocation, against
// the memory plan (train/memory_plan.hpp). On a GPU the plan is checked against the caching
// allocator's peak (bench/gpu_session.sh's memory and long parts); here LibTorch's CPU allocator
// is counted (train/cpu_allocations.hpp, as CPU runs' /train/device_peak_bytes is), and the
// engine runs at 1 rank on the CPU, so the same engine code is measured on any machine.
//
// Two checks per configuration (checkpointing with and without activation offload, MLP tiles,
// everything kept):
//   1. backward frees as it goes: after layer i's backward, what is live is no more than after
//      layer i+1's (a layer's recomputed input and its gradient are dropped once the gradient
//      has been handed on; kept, they grew by two hidden states per layer: 42 GiB of an 8B at
//      90k tokens on an H200);
//   2. the peak over the micro-batch, above what was live before it, is within the plan's terms
//      that such a pass allocates (activations, the loss chunk, one layer's gradients and the
//      reduce buffers), and not far below them.
//
//   activation_memory [--tokens 4096] [--layers 6] [--hidden 64] [--heads 4] [--intermediate 160]
//                     [--kv-heads 2] [--case NAME] [--trace on]
// Prints one line per configuration (--case: only the one named so); exits 1 on a failed check.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "base/logging.hpp"
#include "cluster/mpi_world.hpp"
#include "model_io/load_model.hpp"
#include "train/cpu_allocations.hpp"
#include "train/memory_plan.hpp"
#include "zero/communicator_factory.hpp"
#include "zero/engine.hpp"

namespace so = superoffload;

namespace {

struct Case {
  std::string name;
  bool checkpointing = true, offload = false;
  int64_t tile_tokens = 0;
  bool bf16 = false;
};

std::string model_config(int64_t hidden, int64_t heads, int64_t layers, int64_t intermediate, int64_t kv_heads) {
  const auto field = [](const char* key, int64_t value) {
    return std::string(", \"") + key + "\": " + std::to_string(value);
  };
  return R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 61)" + field("hidden_size", hidden) +
         field("intermediate_size", intermediate) + field("num_hidden_layers", layers) +
         field("num_attention_heads", heads) + field("num_key_value_heads", kv_heads) +
         R"(, "initializer_range": 0.1, "tie_word_embeddings": false})";
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  so::log::init(so::log::Level::warning);
  std::optional<so::cluster::MpiWorld> world;
  world.emplace(&argc, &argv);
  at::set_num_threads(1);
  int64_t tokens = 4096, layers = 6, intermediate = 160, kv_heads = 2, hidden = 64, heads = 4;
  bool trace = false;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokens") tokens = std::stoll(argv[i + 1]);
    if (a == "--layers") layers = std::stoll(argv[i + 1]);
    if (a == "--intermediate") intermediate = std::stoll(argv[i + 1]);
    if (a == "--kv-heads") kv_heads = std::stoll(argv[i + 1]);
    if (a == "--hidden") hidden = std::stoll(argv[i + 1]);
    if (a == "--heads") heads = std::stoll(argv[i + 1]);
    if (a == "--case") only = argv[i + 1];
    if (a == "--trace") trace = std::string(argv[i + 1]) == "on";
  }
  so::train::count_cpu_allocations();

  const auto dir = std::filesystem::temp_directory_path() / ("so_activation_memory_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << model_config(hidden, heads, layers, intermediate, kv_heads);
  const auto size = so::train::model_size_from_config(dir.string());

  const std::vector<Case> cases{{"checkpointing"},
                                {"checkpointing, activation offload", true, true},
                                {"checkpointing, MLP tiles of 512", true, false, 512},
                                {"checkpointing, offload and tiles", true, true, 512},
                                {"no checkpointing", false},
                                {"bf16, checkpointing", true, false, 0, true},
                                {"bf16, offload and tiles", true, true, 512, true},
                                {"bf16, no checkpointing", false, false, 0, true}};
  if (!only.empty() && std::none_of(cases.begin(), cases.end(), [&](const Case& c) { return c.name == only; })) {
    std::fprintf(stderr, "activation_memory: --case \"%s\" names no configuration; the names are:\n", only.c_str());
    for (const auto& c : cases) std::fprintf(stderr, "  %s\n", c.name.c_str());
    std::filesystem::remove_all(dir);
    return 2;
  }
  int failures = 0;
  auto communicator = so::zero::make_communicator(so::config::CommBackend::automatic, at::kCPU, world->world());
  for (const auto& c : cases) {
    if (!only.empty() && c.name != only) continue;
    so::config::Config cfg;
    cfg.precision.bf16 = c.bf16;
    cfg.data.seq_len = tokens;
    cfg.training.train_micro_batch_size_per_gpu = 1;
    cfg.training.activation_checkpointing = c.checkpointing;
    cfg.model.activation_offload = c.offload ? so::config::ActivationOffload::host : so::config::ActivationOffload::none;
    cfg.model.tile_tokens = c.tile_tokens > 0 ? c.tile_tokens : -1;
    cfg.offload.device = so::config::OffloadDevice::none;
    const auto plan = so::train::plan_memory(size, cfg, 1, /*on_gpu=*/false);

    auto loaded = so::model::load_model(dir.string(), "auto", so::config::InitMode::random, 42);
    so::zero::EngineOptions options;
    options.compute_dtype = c.bf16 ? at::kBFloat16 : at::kFloat;
    options.activation_checkpointing = c.checkpointing;
    options.activation_offload = c.offload;
    options.pin_activations = false;
    options.tile_tokens = so::train::mlp_tile_tokens(cfg, size.hidden);
    options.loss_chunk_tokens = 1024;
    so::zero::ZeroEngine engine(loaded.model, *communicator, options);

    auto batch = at::randint(0, 61, {1, tokens}, at::kLong);
    auto labels = so::model::next_token_labels(batch);
    // Once to let every lazily made buffer (the offload's host buffers, LibTorch's) exist.
    engine.forward_backward(batch, labels, {}, 1.0 / static_cast<double>(tokens), 1.0, false);
    std::vector<int64_t> after_backward(size.layers + 2, -1);
    const int64_t before = so::train::cpu_allocated_bytes();
    engine.on_layer_done([&](size_t layer, bool backward) {
      if (backward) after_backward[layer] = so::train::cpu_allocated_bytes();
      if (trace) {
        std::printf("  after layer %zu's %s: live %.2f MiB, peak so far %.2f MiB\n", layer,
                    backward ? "backward" : "forward", mib(static_cast<double>(so::train::cpu_allocated_bytes() - before)),
                    mib(static_cast<double>(so::train::cpu_allocated_peak_bytes() - before)));
      }
    });
    so::train::reset_cpu_allocation_peak();
    engine.forward_backward(batch, labels, {}, 1.0 / static_cast<double>(tokens), 1.0, false);
    const double measured = static_cast<double>(so::train::cpu_allocated_peak_bytes() - before);
    engine.on_layer_done(nullptr);

    // 1. Backward frees as it goes (the blocks: layers 1 .. head - 1).
    const int64_t hidden_state = tokens * size.hidden * 4;
    for (size_t i = 1; i + 2 < after_backward.size(); ++i) {
      const int64_t grew = after_backward[i] - after_backward[i + 1];
      if (grew > hidden_state / 4) {
        std::printf("FAIL %s: after layer %zu's backward %.2f MiB more is live than after layer %zu's (a hidden "
                    "state is %.2f MiB): backward keeps what it has passed\n",
                    c.name.c_str(), i, mib(static_cast<double>(grew)), i + 1, mib(static_cast<double>(hidden_state)));
        ++failures;
        break;
      }
    }
    // 2. The peak against the plan's terms for what a pass allocates.
    const double planned = plan.device_activation_bytes + plan.device_logits_bytes + plan.device_reduce_bytes;
    const double error = (planned - measured) / measured;
    std::printf("%-36s peak over the pass %8.2f MiB, plan %8.2f MiB (activations %.2f, logits %.2f, layer "
                "gradients %.2f): %+.1f%%\n",
                c.name.c_str(), mib(measured), mib(planned), mib(plan.device_activation_bytes),
                mib(plan.device_logits_bytes), mib(plan.device_reduce_bytes), 100 * error);
    if (error < -0.05 || error > 0.25) {
      std::printf("FAIL %s: the plan is %s\n", c.name.c_str(), error < 0 ? "more than 5% low" : "more than 25% high");
      ++failures;
    }
  }
  std::filesystem::remove_all(dir);
  communicator.reset();
  world.reset();
  return failures == 0 ? 0 : 1;
}
