// Block variants benchmark (not a test, #48): forward and backward of one Llama decoder block,
// two ways, same values, same run, interleaved rounds (--compare):
//   projections  its parameters in separate tensors (seven products in forward, q/k/v and gate/up
//                each their own) against the same block bound to one flat buffer as ZeRO-3's
//                gathered layer holds it, where q/k/v and gate/up become one product each and
//                SwiGLU one autograd node (model/blocks/stacked_weights.hpp, swiglu.hpp);
//   swiglu       SwiGLU through its CUDA kernels against autograd's chain (SUPEROFFLOAD_SWIGLU_KERNEL);
//   gqa          grouped kv heads given to SDPA as they are against repeated first
//                (SUPEROFFLOAD_GQA_KERNEL; model/blocks/attention.cpp).
//
//   build/bin/bench_fused_projections [--compare projections|swiglu|gqa] [--shapes llama-3.2-1b,llama-3.1-8b]
//       [--tokens 1024,4096] [--rounds 3] [--dtype fp32|bf16] [--device cpu|cuda] [--threads T]
// The last line per shape and size is `summary: <shape> tokens=N <new>/<old>=…x (speed)`.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/logging.hpp"
#include "bench_common.hpp"
#include "model_io/load_model.hpp"

namespace m = superoffload::model;
namespace fs = std::filesystem;

namespace {

struct Shape {
  std::string name;
  int64_t hidden, intermediate, heads, kv_heads;
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void synchronize(const at::Device& device) {
  if (device.is_cuda()) at::empty({1}, at::TensorOptions().device(device)).cpu();  // waits for the queue
}

std::shared_ptr<m::CausalLM> build_block(const Shape& s, const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": " << s.hidden
                                     << ", \"intermediate_size\": " << s.intermediate
                                     << ", \"num_hidden_layers\": 1, \"num_attention_heads\": " << s.heads
                                     << ", \"num_key_value_heads\": " << s.kv_heads << ", \"vocab_size\": 128}";
  auto model = m::load_model(dir.string(), "auto", superoffload::config::InitMode::random, 1).model;
  fs::remove_all(dir);
  return model;
}

// The block's parameters moved into one buffer in their HF order (the gathered layer's layout).
void bind_to_one_buffer(m::Layer& block) {
  int64_t total = 0;
  for (const auto& [name, p] : block.hf_parameters()) total += p.numel();
  const auto first = block.hf_parameters().front().second;
  const auto flat = at::empty({total}, first.options());
  int64_t offset = 0;
  for (auto [name, p] : block.hf_parameters()) {
    auto view = flat.narrow(0, offset, p.numel()).view(p.sizes());
    view.copy_(p.detach());
    p.set_data(view);
    offset += p.numel();
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One Llama block: q/k/v and gate/up as one product each against separate products"};
  std::vector<std::string> shapes{"llama-3.2-1b"};
  std::vector<int64_t> sizes{1024};
  int rounds = 3, threads = static_cast<int>(std::thread::hardware_concurrency());
  std::string dtype = "fp32", device_name = "cpu", compare = "projections";
  app.add_option("--compare", compare, "projections, swiglu or gqa")->check(CLI::IsMember({"projections", "swiglu", "gqa"}));
  app.add_option("--shapes", shapes, "llama-3.2-1b, llama-3.1-8b (their blocks)")->delimiter(',');
  app.add_option("--tokens", sizes, "tokens per block call")->delimiter(',');
  app.add_option("--rounds", rounds, "interleaved rounds (median)")->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--device", device_name, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--threads", threads, "LibTorch threads")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  superoffload::log::init(superoffload::log::Level::warning);
  // The two variants' names, and how each is switched on before its rounds.
  const std::map<std::string, std::pair<std::string, std::string>> variants{
      {"projections", {"separate", "fused"}}, {"swiglu", {"chain", "kernel"}}, {"gqa", {"repeated", "grouped"}}};
  const auto [old_name, new_name] = variants.at(compare);
  const char* switch_variable = compare == "swiglu" ? "SUPEROFFLOAD_SWIGLU_KERNEL" : "SUPEROFFLOAD_GQA_KERNEL";
  auto select = [&](bool newer) {
    if (compare == "projections") return;
    if (newer) {
      ::unsetenv(switch_variable);
    } else {
      ::setenv(switch_variable, "never", 1);
    }
  };
  ::setenv("SUPEROFFLOAD_FUSED_PROJECTIONS", compare == "projections" ? "always" : "never", 1);
  at::set_num_threads(threads);
  const at::Device device(device_name == "cuda" ? at::kCUDA : at::kCPU);
  const auto type = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  std::printf("bench_fused_projections: %s against %s; %s, %d LibTorch thread(s), CPU capability %s, device %s, %s\n",
              new_name.c_str(), old_name.c_str(), bench::cpu_model().c_str(), at::get_num_threads(),
              at::get_cpu_capability().c_str(), device.str().c_str(), dtype.c_str());
  const std::map<std::string, Shape> known{{"llama-3.2-1b", {"Llama-3.2-1B", 2048, 8192, 32, 8}},
                                           {"llama-3.1-8b", {"Llama-3.1-8B", 4096, 14336, 32, 8}}};
  for (const auto& key : shapes) {
    const auto found = known.find(key);
    if (found == known.end()) {
      std::fprintf(stderr, "bench_fused_projections: unknown shape '%s' (llama-3.2-1b, llama-3.1-8b)\n", key.c_str());
      return 2;
    }
    const auto& s = found->second;
    const auto dir = fs::temp_directory_path() / ("so_bench_fused_" + std::to_string(::getpid()));
    // Two copies of one block (the same seed: the same values); for `projections` the second
    // bound to a flat buffer.
    const auto separate_model = build_block(s, dir), fused_model = build_block(s, dir);
    auto& separate = *separate_model->layers().at(1);
    auto& fused = *fused_model->layers().at(1);
    separate.to(device, type);
    fused.to(device, type);
    if (compare == "projections") bind_to_one_buffer(fused);
    for (const int64_t tokens : sizes) {
      const auto options = at::TensorOptions().device(device).dtype(type);
      const auto x = at::randn({1, tokens, s.hidden}, options);
      const auto upstream = at::randn({1, tokens, s.hidden}, options);
      m::BatchContext context;
      context.position_ids = at::arange(tokens, at::TensorOptions().device(device).dtype(at::kLong)).unsqueeze(0);
      auto step = [&](m::Layer& block) {
        select(&block == &fused);
        block.zero_grad();
        const auto input = x.detach().requires_grad_(true);
        synchronize(device);
        const double start = now();
        block.forward(input, context).backward(upstream);
        synchronize(device);
        return now() - start;
      };
      step(separate);  // warm-up: kernels chosen, caches filled
      step(fused);
      std::map<std::string, std::vector<double>> seconds;
      for (int r = 0; r < rounds; ++r) {
        seconds[old_name].push_back(step(separate));
        seconds[new_name].push_back(step(fused));
      }
      const double n = static_cast<double>(s.hidden) *
                       (2.0 * s.hidden + 2.0 * s.hidden * s.kv_heads / s.heads + 3.0 * s.intermediate);
      const double flops = 6.0 * n * static_cast<double>(tokens);  // the products; attention not counted
      std::printf("%s block, %lld tokens, forward + backward, median of %d:\n", s.name.c_str(),
                  static_cast<long long>(tokens), rounds);
      for (const auto& row : {old_name, new_name}) {
        const double t = bench::median(seconds[row]);
        std::printf("  %-9s %9.1f ms  %7.3f TFLOPS (products)\n", row.c_str(), 1000 * t, flops / t / 1e12);
      }
      std::printf("summary: %s tokens=%lld %s/%s=%.3fx (speed)\n", key.c_str(), static_cast<long long>(tokens),
                  new_name.c_str(), old_name.c_str(), bench::median(seconds[old_name]) / bench::median(seconds[new_name]));
    }
  }
  return 0;
}
