// Under mpirun: the SuperOffload optimizer inside the training step the trainer runs
// (train/step.hpp). Over 30 fp32 steps of a tiny Llama, with
// gradient clipping that triggers and one step whose gradient is made infinite:
//   - speculative (CPU steps during backward; redo with the coefficient when the step clips,
//     undo when it is skipped), with speculation "always" and "auto", and synchronous (after
//     backward) modes give the same parameters within 1e-6 relative;
//   - the infinite step is skipped and counted in all, clipped steps replay speculated
//     sub-groups, the skipped one undoes them;
//   - with a threshold every step exceeds, "auto" stops speculating mid-backward once this
//     rank's norm so far crosses it (some sub-groups of a step speculated, the rest stepped
//     late) and still matches synchronous;
//   - after clipped steps "auto" also stops on its prediction (some of them wrongly, in the
//     sequence with 10 clipped steps of 30) and still matches synchronous;
//   - synchronous mode with every sub-group on the CPU equals the reference sharded AdamW
//     within 1e-6 (the SIMD kernel inside real training; 4e-6 where the reference is the fused
//     CUDA kernel);
//   - CPU steps of sub-groups finish before backward ends (overlap).
// --bucket N: the engine's reduce_bucket_size (default 5e8: one chunk per layer). --low-clip X:
// the threshold every step exceeds (default 0.5, at one rank 1.2).
// With --device cuda the engine (and the 1 - ratio share stepped on the device) runs on each
// rank's GPU with NCCL, so gradients go device -> host and parameters back; without a GPU
// that run exits 77, which CTest reports as skipped.
#include <ATen/Parallel.h>
#include <mpi.h>
#include <torch/cuda.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>

#include "base/logging.hpp"
#include "cluster/mpi_world.hpp"
#include "model_io/load_model.hpp"
#include "optim/offload_optimizer.hpp"
#include "optim/sharded_adamw.hpp"
#include "synthetic_batches.hpp"
#include "train/step.hpp"
#include "zero/communicator_factory.hpp"

namespace so = superoffload;

namespace {

constexpr int kSteps = 30, kInfStep = 12, kMicro = 2, kAccumulation = 2, kSeq = 16;
constexpr double kClip = 1.5, kLr = 5e-3;  // 10 of 30 steps clip
// Every step clips, and a rank's own norm crosses the threshold mid-backward: 0.5 at 2 ranks;
// one rank holds the whole of each sub-group, and its first CPU sub-group alone is over 0.5, so
// auto stopped before it speculated anything (found on the one-rank GPU run, the same on the
// CPU): 1.2 there (29 of 30 steps clip, 28 stop mid-backward). <= 0: by world size.
double g_low_clip = 0;

struct Run {
  std::vector<at::Tensor> masters;  // per layer, this rank's shard
  int skipped = 0, clipped = 0, overlapped = 0;
  so::optim::SpeculationCounts counts;  // summed over steps and ranks
  int stopped_mid_backward = 0;         // steps (summed over ranks) with speculated and late sub-groups
};

enum class Mode { speculate_always, speculate_auto, synchronous, reference };

// [zero] reduce_bucket_size of the engine (--bucket): small values cut every layer's
// reduce-scatter into many chunks, some of them in host memory (the CPU share's gradient).
int64_t g_bucket = 500'000'000;

Run train(const std::string& dir, Mode mode, double ratio, double clip, at::Device device, MPI_Comm world) {
  auto comm = so::zero::make_communicator(so::config::CommBackend::automatic, device, world);
  auto loaded = so::model::load_model(dir, "auto", so::config::InitMode::random, 42);
  so::zero::EngineOptions options;
  options.compute_dtype = at::kFloat;
  options.persistence_threshold = 0;
  options.reduce_bucket_size = g_bucket;
  options.device = device;
  so::zero::ZeroEngine engine(loaded.model, *comm, options);
  const so::optim::AdamWSettings adamw{.weight_decay = 0.1, .gradient_clipping = clip};
  std::unique_ptr<so::optim::Optimizer> optimizer;
  if (mode == Mode::reference) {
    optimizer = std::make_unique<so::optim::ShardedAdamW>(engine, adamw);
  } else {
    optimizer = std::make_unique<so::optim::OffloadOptimizer>(
        engine, so::optim::OffloadSettings{.adamw = adamw,
                                           .sub_group_size = 3000,  // several sub-groups per layer
                                           .ratio = ratio,
                                           .speculation = mode == Mode::speculate_always ? so::optim::Speculation::always
                                                          : mode == Mode::speculate_auto ? so::optim::Speculation::automatic
                                                                                         : so::optim::Speculation::never,
                                           .threads = 1});
  }
  int step_now = 0;
  // Injection point in front of the optimizer: one step's gradient becomes infinite.
  const so::train::StepHooks hooks{.before_gradient_ready = [&](size_t layer) {
    if (step_now == kInfStep && layer == engine.layers().size() - 2 && comm->rank() == 0) {
      auto& l = engine.layers()[layer];  // element 0 of the shard: on the device or in host memory
      (l.gradient_split() > 0 ? l.grad_shard() : l.host_grad())[0] = std::numeric_limits<float>::infinity();
    }
  }};
  Run run;
  for (step_now = 0; step_now < kSteps; ++step_now) {
    const auto batches =
        so::testing::rank_micro_batches(step_now, kMicro, kAccumulation, comm->size(), comm->rank(), kSeq);
    const auto outcome = so::train::run_step(engine, *optimizer, batches, kLr, hooks).outcome;
    run.skipped += outcome.skipped;
    run.clipped += outcome.clipped;
    run.overlapped += static_cast<int>(outcome.speculated_before_backward_end);
    const auto& c = outcome.speculation;
    int64_t mine[8] = {c.speculated, c.committed,       c.replayed,          c.undone,
                       c.late,       c.predicted_stops, c.mispredicted_stops, c.speculated > 0 && c.late > 0},
            all[8];
    MPI_Allreduce(mine, all, 8, MPI_INT64_T, MPI_SUM, world);
    run.counts.speculated += all[0];
    run.counts.committed += all[1];
    run.counts.replayed += all[2];
    run.counts.undone += all[3];
    run.counts.late += all[4];
    run.counts.predicted_stops += all[5];
    run.counts.mispredicted_stops += all[6];
    run.stopped_mid_backward += static_cast<int>(all[7]);
  }
  for (size_t l = 0; l < engine.layers().size(); ++l) {
    run.masters.push_back(optimizer->master(l).to(at::kCPU, false, /*copy=*/true));
  }
  return run;
}

double worst_relative(const Run& a, const Run& b) {
  double worst = 0;
  for (size_t l = 0; l < a.masters.size(); ++l) {
    const auto diff = (a.masters[l] - b.masters[l]).abs().max().item<double>();
    worst = std::max(worst, diff / std::max(1e-3, b.masters[l].abs().max().item<double>()));
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  so::log::init(so::log::Level::warning);
  std::optional<so::cluster::MpiWorld> world;
  world.emplace(&argc, &argv);
  at::set_num_threads(1);
  const int rank = world->rank();
  at::Device device = at::kCPU;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--device") device = at::Device(argv[i + 1]);
    if (std::string(argv[i]) == "--bucket") g_bucket = std::stoll(argv[i + 1]);
    if (std::string(argv[i]) == "--low-clip") g_low_clip = std::stod(argv[i + 1]);
  }
  if (device.is_cuda()) {
    if (!torch::cuda::is_available()) {
      if (rank == 0) std::printf("SKIPPED: --device cuda, but no CUDA device is visible\n");
      world.reset();
      return 77;
    }
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(world->local_rank() % torch::cuda::device_count()));
  }
  const auto dir = std::filesystem::temp_directory_path() / ("so_offload_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 61, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
    "initializer_range": 0.1, "tie_word_embeddings": false})";
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::printf("rank %d FAIL: %s\n", rank, what);
      ++failures;
    }
  };
  try {
    const auto always = train(dir.string(), Mode::speculate_always, 0.7, kClip, device, world->world());
    const auto automatic = train(dir.string(), Mode::speculate_auto, 0.7, kClip, device, world->world());
    const auto synchronous = train(dir.string(), Mode::synchronous, 0.7, kClip, device, world->world());
    if (g_low_clip <= 0) g_low_clip = world->size() == 1 ? 1.2 : 0.5;
    const auto auto_low = train(dir.string(), Mode::speculate_auto, 0.7, g_low_clip, device, world->world());
    const auto sync_low = train(dir.string(), Mode::synchronous, 0.7, g_low_clip, device, world->world());
    const auto all_cpu = train(dir.string(), Mode::synchronous, 1.0, kClip, device, world->world());
    const auto reference = train(dir.string(), Mode::reference, 1.0, kClip, device, world->world());
    const double always_vs_sync = worst_relative(always, synchronous);
    const double auto_vs_sync = worst_relative(automatic, synchronous);
    const double low_vs_sync = worst_relative(auto_low, sync_low);
    const double cpu_vs_reference = worst_relative(all_cpu, reference);
    auto describe = [](const char* name, const Run& r, double diff) {
      std::printf("%-24s vs synchronous %.2e; skipped %d, clipped %d steps; CPU sub-group steps: %lld speculated "
                  "(%lld committed, %lld replayed, %lld undone), %lld late; %d rank-steps stopped mid-backward (%lld "
                  "on a prediction, %lld wrongly); %d finished before backward ended\n",
                  name, diff, r.skipped, r.clipped, static_cast<long long>(r.counts.speculated),
                  static_cast<long long>(r.counts.committed), static_cast<long long>(r.counts.replayed),
                  static_cast<long long>(r.counts.undone), static_cast<long long>(r.counts.late), r.stopped_mid_backward,
                  static_cast<long long>(r.counts.predicted_stops), static_cast<long long>(r.counts.mispredicted_stops),
                  r.overlapped);
    };
    if (rank == 0) {
      describe("speculation always", always, always_vs_sync);
      describe("speculation auto", automatic, auto_vs_sync);
      describe("auto, low threshold", auto_low, low_vs_sync);
      std::printf("synchronous, all sub-groups on the CPU, vs the reference sharded AdamW: %.2e (reference clipped %d, "
                  "skipped %d)\n",
                  cpu_vs_reference, reference.clipped, reference.skipped);
    }
    check(always_vs_sync <= 1e-6, "speculation always and synchronous parameters differ by more than 1e-6");
    check(auto_vs_sync <= 1e-6, "speculation auto and synchronous parameters differ by more than 1e-6");
    check(low_vs_sync <= 1e-6, "speculation auto and synchronous differ by more than 1e-6 when every step clips");
    // On the CPU the reference is LibTorch's CPU AdamW, with the same operations in the same
    // order: 1e-6. On a GPU it is LibTorch's fused CUDA AdamW (nvcc contracts multiply-adds):
    // one-ulp differences per step that the next forward and backward amplify over 30 steps
    // (1.24e-6 measured on an H200): 4e-6, still far below any wrong update (1e-3 and up).
    const double reference_limit = device.is_cpu() ? 1e-6 : 4e-6;
    check(cpu_vs_reference <= reference_limit, "the CPU kernel in training differs from the reference AdamW by more than "
                                               "its limit (1e-6 on the CPU, 4e-6 against the CUDA kernel)");
    check(always.skipped == 1 && automatic.skipped == 1 && synchronous.skipped == 1,
          "the infinite step must be skipped exactly once");
    check(always.clipped >= 2, "clipping must trigger in this test");
    check(always.counts.replayed > 0, "clipped steps must replay speculated sub-groups");
    check(always.counts.undone > 0, "the skipped step must undo speculated sub-groups");
    check(always.counts.late == 0 || always.skipped > 0, "speculation always left sub-groups to step late");
    check(always.overlapped > 0, "no CPU sub-group step finished before backward ended");
    check(always.counts.speculated ==
              always.counts.committed + always.counts.replayed + always.counts.undone,
          "every speculated sub-group is committed, replayed or undone");
    check(auto_low.stopped_mid_backward > 0, "auto never stopped speculating mid-backward when every step clips");
    check(auto_low.clipped >= 25, "with the low threshold nearly every step must clip");
    check(auto_low.counts.late > 0, "when every step clips, auto should leave sub-groups to step late");
    check(automatic.counts.predicted_stops > 0, "after clipped steps auto never stopped speculating on its prediction");
    check(auto_low.counts.predicted_stops > 0, "when every step clips, auto never stopped on its prediction");
    check(always.counts.predicted_stops == 0 && synchronous.counts.predicted_stops == 0,
          "only speculation auto predicts");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    failures = 1;
  }
  int any = 0;
  MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  std::filesystem::remove_all(dir);
  world.reset();
  return any ? 1 : 0;
}
