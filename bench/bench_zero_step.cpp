// ZeRO-3 step breakdown (a benchmark, not a test). Under mpirun -np N: trains a ~125M-
// parameter Llama (hidden 768, 12 layers, vocab 32000) from random weights for a few steps of
// the training step (train/step.hpp, with the on-device AdamW and clipping at 1.0) and prints, per step, forward, backward, all-gather wait, reduce-scatter and optimizer
// time, and how much of the all-gather and reduce-scatter time was hidden behind compute: the
// same collectives (every layer's all-gather; every layer's gradient reduce-scatter, fp32) are
// also timed one by one, blocking, in the same run, and hidden = 1 − waited / blocking.
// rs_wait_s is the reduce-scatter time left exposed (blocked in waits), the figure
// [zero] reduce_bucket_size and the overlap with backward exist to shrink.
//
//   mpirun -np 2 build/bin/bench_zero_step [--steps 3] [--seq 256] [--micro 1] [--threads T]
//                                          [--bucket ELEMENTS]
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "base/logging.hpp"
#include "bench_common.hpp"
#include "base/timer.hpp"
#include "cluster/mpi_world.hpp"
#include "comm/mpi_communicator.hpp"
#include "model_io/load_model.hpp"
#include "optim/sharded_adamw.hpp"
#include "train/step.hpp"
#include "zero/engine.hpp"

namespace so = superoffload;
using so::base::now_s;

namespace {

constexpr const char* kConfig = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 768,
  "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 4,
  "initializer_range": 0.02, "tie_word_embeddings": false})";

}  // namespace

int main(int argc, char** argv) {
  so::log::init(so::log::Level::warning);
  std::optional<so::cluster::MpiWorld> world;
  world.emplace(&argc, &argv);
  int steps = 3, seq = 256, micro = 1, threads = 1;
  int64_t bucket = so::zero::EngineOptions{}.reduce_bucket_size;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--steps") steps = std::stoi(argv[i + 1]);
    else if (a == "--seq") seq = std::stoi(argv[i + 1]);
    else if (a == "--micro") micro = std::stoi(argv[i + 1]);
    else if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else if (a == "--bucket") bucket = std::stoll(argv[i + 1]);
  }
  at::set_num_threads(threads);
  const int rank = world->rank(), size = world->size();
  const auto dir = std::filesystem::temp_directory_path() / ("so_bench_zero_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << kConfig;

  so::comm::MpiCommunicator comm(world->world());
  auto loaded = so::model::load_model(dir.string(), "auto", so::config::InitMode::random, 1);
  const auto params = loaded.model->shape().total_parameters;
  so::zero::EngineOptions options;
  options.compute_dtype = at::kFloat;
  options.persistence_threshold = 0;
  options.reduce_bucket_size = bucket;
  so::zero::ZeroEngine engine(loaded.model, comm, options);
  so::optim::ShardedAdamW optimizer(engine, {.gradient_clipping = 1.0});
  if (rank == 0) {
    std::printf("bench_zero_step: %s; Llama %.1fM parameters, %d rank(s), %d thread(s) each, micro-batch %d x %d "
                "tokens, fp32, reduce_bucket_size %lld\n",
                bench::cpu_model().c_str(), params / 1e6, size, threads, micro, seq, static_cast<long long>(bucket));
    std::printf("%-5s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "step", "total_s", "fwd_s", "bwd_s", "gather_s", "reduce_s",
                "rs_wait_s", "optim_s", "ag_hidden", "rs_hidden");
  }
  // Blocking all-gather time of every layer, for the hidden-communication estimate.
  double blocking_gather_s = 0;
  for (auto& layer : engine.layers()) {
    comm.barrier();
    const double start = now_s();
    layer.wait_gathered();
    blocking_gather_s += now_s() - start;
    layer.release();
  }
  // Blocking reduce-scatter of every layer's fp32 gradient, once (what backward waited for
  // when each layer's reduction was waited on at once).
  double blocking_reduce_s = 0;
  for (auto& layer : engine.layers()) {
    const auto& layout = layer.layout();
    auto send = at::ones({layout.padded_numel()}, at::kFloat);
    auto recv = at::empty({layout.shard_numel()}, at::kFloat);
    comm.barrier();
    const double start = now_s();
    comm.reduce_scatter(send.data_ptr(), recv.data_ptr(), static_cast<size_t>(layout.shard_numel()),
                        so::comm::DataType::f32, so::comm::ReduceOp::sum)
        ->wait();
    blocking_reduce_s += now_s() - start;
  }
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  for (int step = 0; step < steps; ++step) {
    const auto tokens = at::randint(0, 32000, {micro, seq}, generator, at::kLong);
    const auto labels = so::model::next_token_labels(tokens);
    comm.barrier();
    const auto r = so::train::run_step(engine, optimizer, {{tokens, labels}}, 1e-4);
    const auto& t = r.engine;
    // Two passes gather every layer (forward and backward).
    const double hidden = 1.0 - t.gather_wait_s / std::max(1e-9, 2 * blocking_gather_s);
    const double reduce_hidden = 1.0 - t.reduce_wait_s / std::max(1e-9, blocking_reduce_s);
    if (rank == 0) {
      std::printf("%-5d %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %8.0f%% %8.0f%%\n", step + 1, r.seconds, t.forward_s,
                  t.backward_s, t.gather_wait_s, t.reduce_s, t.reduce_wait_s, r.optimizer_s,
                  100 * std::max(0.0, hidden), 100 * std::max(0.0, reduce_hidden));
    }
  }
  if (rank == 0) {
    const auto& m = engine.memory();
    std::printf("parameter elements per rank: shards %.1fM, peak gathered %.1fM (model %.1fM)\n", m.shard_numel / 1e6,
                m.peak_live_numel / 1e6, params / 1e6);
    std::printf("blocking all-gather of every layer once: %.3f s; blocking reduce-scatter of every layer once: %.3f s\n",
                blocking_gather_s, blocking_reduce_s);
  }
  std::filesystem::remove_all(dir);
  world.reset();
  return 0;
}
