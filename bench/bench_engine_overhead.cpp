// Engine overhead benchmark (not a test): what the ZeRO-3 engine costs over a plain LibTorch
// training loop on the same model, weights and batches, measured in the same run.
//
//   plain LibTorch loop          the whole model under autograd (logits, fp32 cross-entropy,
//                                one backward), clip_grad_norm_ at 1.0, at::_fused_adamw_; in
//                                bf16 the usual mixed-precision loop: bf16 weights and
//                                gradients, fp32 master weights and moments
//   engine + AdamW on device     train::run_step with optim::ShardedAdamW
//   engine + SuperOffload        train::run_step with optim::OffloadOptimizer (the CPU kernel,
//                                speculation "auto"), what `superoffload train` runs by default
//
// Activation checkpointing is off on every side (the plain loop has none); --checkpointing
// turns it on in the engine to show its price. Every variant trains its own copy of the same
// initial weights on the same batches, so the losses agree to round-off (printed). Rounds are
// interleaved (each variant runs --steps steps per round after one untimed warm-up step); the
// summary uses medians: each variant's median step, and the median over rounds of the ratio
// engine / plain within a round.
//
// Under mpirun -np N every rank runs all variants on its own micro-batches; the engine's
// exposed communication (all-gather and reduce-scatter waits) is printed apart, and
// `compute_ratio` holds the rest of its step against the plain loop of the same rank (which
// never communicates; its loss is then not comparable and shows as nan).
//
// The process uses `superoffload train`'s host allocator setting (base/allocator.hpp: layer-
// sized buffers are mmap'ed and returned on free), for every variant; --glibc-malloc keeps
// glibc's defaults instead.
//
//   build/bin/bench_engine_overhead [--arch gpt2|llama] [--layers 12] [--dtype fp32|bf16|both]
//       [--micro 4] [--seq 64] [--steps 2] [--rounds 5] [--threads T] [--checkpointing]
// The last lines are `summary: dtype=… variant=… ratio=… …`.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/allocator.hpp"
#include "base/logging.hpp"
#include "base/timer.hpp"
#include "bench_common.hpp"
#include "cluster/mpi_world.hpp"
#include "comm/mpi_communicator.hpp"
#include "model_io/load_model.hpp"
#include "optim/cpu_adamw.hpp"
#include "optim/offload_optimizer.hpp"
#include "optim/sharded_adamw.hpp"
#include "train/step.hpp"
#include "zero/engine.hpp"

namespace so = superoffload;
using so::base::now_s;

namespace {

// GPT-2 small (124M with 12 layers, tied embeddings) and a Llama of about the same size.
std::string model_config(const std::string& arch, int layers) {
  const auto n = std::to_string(layers);
  if (arch == "gpt2") {
    return R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257, "n_embd": 768,
      "n_layer": )" + n + R"(, "n_head": 12, "n_positions": 1024, "initializer_range": 0.02})";
  }
  return R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 768, "intermediate_size": 2048,
    "num_hidden_layers": )" + n + R"(, "num_attention_heads": 12, "num_key_value_heads": 4, "initializer_range": 0.02,
    "tie_word_embeddings": false})";
}

constexpr double kLr = 1e-4, kClip = 1.0;
constexpr so::optim::AdamWSettings kAdamW{.gradient_clipping = kClip};

// One step of a variant: returns the mean token loss of the global batch.
struct Variant {
  std::string name;
  std::function<double(const so::train::MicroBatch&)> step;
  std::function<so::zero::PhaseTimes()> engine_times;  // unset for the plain loop
  std::function<double()> optimizer_s;                 // of the last step (engine variants)
  std::vector<double> seconds, exposed;                // per round: mean step, mean exposed comm
  std::vector<double> losses;
};

// What a LibTorch user writes, with the engine's arithmetic: fp32 loss over the whole batch,
// norm clipping as torch.nn.utils.clip_grad_norm_, fused AdamW on fp32 master weights. It
// never communicates: under mpirun it is each rank's own compute baseline.
class PlainLoop {
 public:
  PlainLoop(std::shared_ptr<so::model::CausalLM> model, at::ScalarType dtype) : model_(std::move(model)) {
    torch::NoGradGuard no_grad;
    for (const auto& layer : model_->layers()) {
      for (auto& [name, p] : layer->hf_parameters()) {
        auto& group = model_->decays(name) ? decayed_ : plain_;
        group.master.push_back(p.detach().to(at::kFloat).clone());
        group.exp_avg.push_back(at::zeros_like(group.master.back()));
        group.exp_avg_sq.push_back(at::zeros_like(group.master.back()));
        group.steps.push_back(at::zeros({}, at::kFloat));
        group.params.push_back(p);
      }
      layer->to(dtype);
    }
    mixed_ = dtype != at::kFloat;
    // In fp32 the master weights are the parameters themselves.
    if (!mixed_) {
      for (auto* group : {&decayed_, &plain_}) {
        for (size_t i = 0; i < group->params.size(); ++i) group->master[i] = group->params[i].detach();
      }
    }
  }

  double step(const so::train::MicroBatch& batch) {
    const auto& layers = model_->layers();
    so::model::BatchContext context;
    const int64_t b = batch.tokens.size(0), s = batch.tokens.size(1);
    context.position_ids = at::arange(s, at::kLong).unsqueeze(0).expand({b, s});
    std::vector<so::model::RouterStatistics> routers;  // a dense model records none
    context.router_statistics = &routers;
    const double tokens = static_cast<double>(batch.labels.ne(so::model::kIgnoreLabel).sum().item<int64_t>());
    at::Tensor x = batch.tokens;
    for (const auto& layer : layers) x = layer->forward(x, context);
    const auto vocab = x.size(-1);
    auto loss = at::cross_entropy_loss(x.reshape({-1, vocab}).to(at::kFloat), batch.labels.reshape({-1}), {},
                                       at::Reduction::Sum, so::model::kIgnoreLabel);
    const double loss_sum = loss.item<double>();
    (loss / tokens).backward();

    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> grads[2];
    Group* groups[2] = {&decayed_, &plain_};
    double squares = 0;
    for (int g = 0; g < 2; ++g) {
      for (auto& p : groups[g]->params) {
        auto grad = p.grad().defined() ? p.grad() : at::zeros_like(p);
        grads[g].push_back(mixed_ ? grad.to(at::kFloat) : grad);
        p.mutable_grad() = at::Tensor();
      }
      for (const auto& n : at::_foreach_norm(grads[g], 2)) squares += std::pow(n.item<double>(), 2);
    }
    const double coefficient = so::optim::clip_coefficient(kClip, std::sqrt(squares));
    for (int g = 0; g < 2; ++g) {
      auto& group = *groups[g];
      if (coefficient < 1.0) at::_foreach_mul_(grads[g], coefficient);
      at::_foreach_add_(group.steps, 1.0);
      at::_fused_adamw_(group.master, grads[g], group.exp_avg, group.exp_avg_sq, {}, group.steps, kLr, kAdamW.beta1,
                        kAdamW.beta2, g == 0 ? kAdamW.weight_decay : 0.0, kAdamW.eps, false, false);
      if (mixed_) {
        for (size_t i = 0; i < group.params.size(); ++i) group.params[i].detach().copy_(group.master[i]);
      }
    }
    return loss_sum / tokens;
  }

 private:
  struct Group {
    std::vector<at::Tensor> params, master, exp_avg, exp_avg_sq, steps;
  };
  std::shared_ptr<so::model::CausalLM> model_;
  Group decayed_, plain_;
  bool mixed_ = false;
};

const char* dtype_name(at::ScalarType t) { return t == at::kFloat ? "fp32" : "bf16"; }

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  so::log::init(so::log::Level::warning);
  std::optional<so::cluster::MpiWorld> world;
  world.emplace(&argc, &argv);
  CLI::App app{"Engine overhead: the ZeRO-3 engine against a plain LibTorch loop, same run"};
  std::string arch = "gpt2", dtypes = "both";
  int micro = 4, seq = 64, steps = 2, rounds = 5, threads = 0, layers = 12;
  bool checkpointing = false, glibc_malloc = false;
  app.add_option("--arch", arch, "model: gpt2 (124M, tied) or llama (~125M)")->check(CLI::IsMember({"gpt2", "llama"}));
  app.add_option("--layers", layers, "decoder layers (12: GPT-2 small)")->check(CLI::Range(1, 96));
  app.add_option("--dtype", dtypes, "compute dtype")->check(CLI::IsMember({"fp32", "bf16", "both"}));
  app.add_option("--micro", micro, "sequences per micro-batch (per rank)");
  app.add_option("--seq", seq, "tokens per sequence");
  app.add_option("--steps", steps, "timed steps per variant and round");
  app.add_option("--rounds", rounds, "interleaved rounds");
  app.add_option("--threads", threads, "LibTorch (and optimizer) threads per rank; 0: cores / ranks");
  app.add_flag("--checkpointing", checkpointing, "activation checkpointing in the engine");
  app.add_flag("--glibc-malloc", glibc_malloc, "keep glibc's allocator defaults (not train's setting)");
  CLI11_PARSE(app, argc, argv);
  if (!glibc_malloc) so::base::configure_host_allocator();

  const int rank = world->rank(), size = world->size();
  if (threads <= 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / size);
  at::set_num_threads(threads);
  const auto dir = std::filesystem::temp_directory_path() / ("so_bench_overhead_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << model_config(arch, layers);
  so::comm::MpiCommunicator comm(world->world());
  auto load = [&] { return so::model::load_model(dir.string(), "auto", so::config::InitMode::random, 7).model; };
  const auto parameters = load()->shape().total_parameters;
  const int64_t vocab = arch == "gpt2" ? 50257 : 32000;

  // Every variant sees the same batches in the same order (each rank its own).
  auto generator = at::make_generator<at::CPUGeneratorImpl>(100 + rank);
  std::vector<so::train::MicroBatch> batches;
  for (int i = 0; i < 1 + steps * rounds; ++i) {
    auto tokens = at::randint(0, vocab, {micro, seq}, generator, at::kLong);
    batches.push_back({tokens, so::model::next_token_labels(tokens)});
  }
  if (rank == 0) {
    std::printf("bench_engine_overhead: %s, AdamW kernel target %s\n", bench::cpu_model().c_str(),
                so::optim::adamw_target().c_str());
    std::printf("  %s %.1fM parameters, %d rank(s) x %d thread(s), micro-batch %d x %d tokens per rank, activation "
                "checkpointing in the engine %s, clip %.1f, %s allocator\n",
                arch.c_str(), parameters / 1e6, size, threads, micro, seq, checkpointing ? "on" : "off", kClip,
                glibc_malloc ? "glibc's default" : "train's");
  }

  std::vector<std::string> summaries;
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    if (dtypes != "both" && dtypes != dtype_name(dtype)) continue;
    PlainLoop plain(load(), dtype);
    so::zero::EngineOptions options;
    options.compute_dtype = dtype;
    options.activation_checkpointing = checkpointing;
    so::zero::ZeroEngine device_engine(load(), comm, options);
    so::optim::ShardedAdamW device_adamw(device_engine, kAdamW);
    so::zero::ZeroEngine offload_engine(load(), comm, options);
    so::optim::OffloadOptimizer offload(offload_engine, {.adamw = kAdamW, .threads = static_cast<size_t>(threads)});
    double optimizer_s[2] = {0, 0};
    auto engine_step = [&](so::zero::ZeroEngine& engine, so::optim::Optimizer& optimizer, int which) {
      return [e = &engine, o = &optimizer, last = &optimizer_s[which]](const so::train::MicroBatch& batch) {
        const auto r = so::train::run_step(*e, *o, {batch}, kLr);
        *last = r.optimizer_s;
        return r.loss;
      };
    };
    std::vector<Variant> variants;
    variants.push_back({"plain LibTorch loop", [&](const auto& b) { return plain.step(b); }, nullptr});
    variants.push_back({"engine + AdamW on device", engine_step(device_engine, device_adamw, 0),
                        [&] { return device_engine.times(); }, [&] { return optimizer_s[0]; }});
    variants.push_back({"engine + SuperOffload", engine_step(offload_engine, offload, 1),
                        [&] { return offload_engine.times(); }, [&] { return optimizer_s[1]; }});

    for (auto& v : variants) v.losses.push_back(v.step(batches[0]));  // warm-up (allocator, first-touch)
    for (int round = 0; round < rounds; ++round) {
      for (auto& v : variants) {
        double total = 0, exposed = 0;
        for (int s = 0; s < steps; ++s) {
          comm.barrier();
          const double start = now_s();
          v.losses.push_back(v.step(batches[static_cast<size_t>(1 + round * steps + s)]));
          total += now_s() - start;
          if (v.engine_times) {
            const auto t = v.engine_times();
            exposed += t.gather_wait_s + t.reduce_wait_s;
          }
        }
        v.seconds.push_back(total / steps);
        v.exposed.push_back(exposed / steps);
      }
    }
    if (rank != 0) continue;
    std::printf("\n  %s %-28s %9s %9s %9s %11s %13s\n", dtype_name(dtype), "", "best_s", "median_s", "exposed_s",
                "vs_plain", "loss_rel_diff");
    const auto& base = variants[0];
    for (const auto& v : variants) {
      std::vector<double> ratios, compute_ratios;
      double loss_diff = 0;
      for (size_t r = 0; r < v.seconds.size(); ++r) {
        ratios.push_back(v.seconds[r] / base.seconds[r]);
        compute_ratios.push_back((v.seconds[r] - v.exposed[r]) / base.seconds[r]);
      }
      // At world N the plain loop's loss is its rank's alone: not comparable.
      if (size > 1) loss_diff = std::nan("");
      for (size_t i = 0; size == 1 && i < v.losses.size(); ++i) {
        loss_diff = std::max(loss_diff, std::abs(v.losses[i] - base.losses[i]) / std::abs(base.losses[i]));
      }
      std::printf("  %-33s %9.3f %9.3f %9.3f %11.3f %13.1e\n", v.name.c_str(),
                  *std::min_element(v.seconds.begin(), v.seconds.end()), bench::median(v.seconds),
                  bench::median(v.exposed), bench::median(ratios), loss_diff);
      if (&v == &base) continue;
      const auto t = v.engine_times();
      std::printf("    last step (s): forward %.3f, backward %.3f, gather wait %.3f, reduce %.3f (wait %.3f), "
                  "optimizer after backward %.3f\n",
                  t.forward_s, t.backward_s, t.gather_wait_s, t.reduce_s, t.reduce_wait_s, v.optimizer_s());
      char line[256];
      std::snprintf(line, sizeof line,
                    "summary: dtype=%s variant=\"%s\" ranks=%d threads=%d step_s=%.3f plain_s=%.3f ratio=%.3f "
                    "exposed_comm_s=%.3f compute_ratio=%.3f",
                    dtype_name(dtype), v.name.c_str(), size, threads, bench::median(v.seconds),
                    bench::median(base.seconds), bench::median(ratios), bench::median(v.exposed),
                    bench::median(compute_ratios));
      summaries.push_back(line);
    }
  }
  if (rank == 0) {
    std::printf("\n");
    for (const auto& line : summaries) std::printf("%s\n", line.c_str());
  }
  std::filesystem::remove_all(dir);
  world.reset();
  return 0;
}
