// MoE expert benchmark (not a test, #49): forward and backward of one MoE layer's experts —
// the routed (token, slot) pairs sorted by expert, the experts, the weighted sum back per token
// — with the moe plugin's own code (plugins/moe/experts.hpp), at the shapes of Qwen3-30B-A3B
// (128 experts, top-8, hidden 2048, expert intermediate 768) and GPT-OSS-20B (32 experts,
// top-4, hidden 2880, intermediate 2880, clamped SwiGLU with biases).
//
// Rows, each a median over interleaved rounds, all in the same run:
//   loop             the per-expert loop the plugin ran before (a call per expert, group sizes
//                    read on the host)
//   grouped/library  one grouped product per projection, LibTorch's at::_grouped_mm
//   grouped/loop     the same, the groups multiplied one by one inside the product (what the
//                    plugin uses on a CPU)
//   grouped GEMMs    the grouped layer's six products alone (forward and backward, the same
//                    operands and group sizes, the kernel the plugin picks on the device): no
//                    routing, gathering, activation or weighted sum — what is left of the
//                    grouped row is this project's code, the rest LibTorch's grouped kernel.
//                    On a GPU only: on this project's 2-core CPU VMs the same weight-gradient
//                    product took twice as long here as inside the layer, every time, with
//                    over half the run in the kernel (fresh multi-GB outputs faulted in);
//                    not explained, so not printed as a split of the layer's time
//   dense            one plain matrix product per projection of the same shape and FLOPs (all
//                    pairs through one expert's weights): the ceiling
// The SwiGLU families' expert weights lie back to back in one buffer in HF's parameter order
// (gate, up, down of expert 0, then of expert 1, ...), as in the engine's gathered layer, so
// the grouped products take them as strided views, not stacked copies.
// TFLOPS count the active FLOPs only: 6 · pairs · hidden · intermediate per projection set in
// forward, three times that with backward. Routing is random (uniform over experts).
//
//   build/bin/bench_moe_layer [--shapes qwen3,gpt-oss] [--tokens 4096,16384] [--rounds 3]
//       [--dtype fp32|bf16] [--device cpu|cuda] [--threads T]
// The last line per shape and size is `summary: <shape> tokens=N grouped/loop=… grouped/dense=…`.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <stdlib.h>
#include <torch/autograd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"
#include "model/blocks/stacked_weights.hpp"
#include "moe/experts.hpp"
#include "moe/grouped_gemm.hpp"

namespace moe = superoffload::plugins::moe;

namespace {

struct Shape {
  std::string name;
  int64_t experts, top_k, hidden, intermediate;
  bool clamped;  // GPT-OSS's experts (biases, interleaved gate/up, clamped SwiGLU)
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void synchronize(const at::Device& device) {
  if (device.is_cuda()) at::empty({1}, at::TensorOptions().device(device)).cpu();  // waits for the queue
}

// The weights of one layer's experts, each a leaf with a gradient.
struct Experts {
  std::vector<at::Tensor> gate, up, down;  // per expert (the SwiGLU families)
  moe::ClampedSwiglu clamped;              // GPT-OSS
  std::vector<at::Tensor> leaves;
  at::Tensor flat;  // the SwiGLU families' weights, back to back
};

Experts make_experts(const Shape& s, const at::TensorOptions& options) {
  Experts x;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hidden));
  auto leaf = [&](at::IntArrayRef sizes) {
    auto t = (at::randn(sizes, options.dtype(at::kFloat)) * scale).to(options.dtype()).requires_grad_(true);
    x.leaves.push_back(t);
    return t;
  };
  if (s.clamped) {
    x.clamped.gate_up = leaf({s.experts, s.hidden, 2 * s.intermediate});
    x.clamped.gate_up_bias = leaf({s.experts, 2 * s.intermediate});
    x.clamped.down = leaf({s.experts, s.intermediate, s.hidden});
    x.clamped.down_bias = leaf({s.experts, s.hidden});
    return x;
  }
  // Bound to views of one buffer as zero::PartitionedLayer binds a gathered layer's parameters.
  const int64_t matrix = s.intermediate * s.hidden;
  x.flat = at::empty({3 * s.experts * matrix}, options);
  int64_t offset = 0;
  auto bound = [&](at::IntArrayRef sizes) {
    auto t = leaf(sizes);
    x.flat.narrow(0, offset, matrix).view(sizes).copy_(t.detach());
    t.set_data(x.flat.narrow(0, offset, matrix).view(sizes));
    offset += matrix;
    return t;
  };
  for (int64_t e = 0; e < s.experts; ++e) {
    x.gate.push_back(bound({s.intermediate, s.hidden}));
    x.up.push_back(bound({s.intermediate, s.hidden}));
    x.down.push_back(bound({s.hidden, s.intermediate}));
  }
  return x;
}

// The grouped products alone: the operands of the gate/up and down products as the plugin
// forms them, fed with fixed inputs; backward with fixed gradients. Six grouped products.
struct GemmOperands {
  at::Tensor input, gate_up, down, hidden, upstream_gate_up, upstream_down;
};
double run_grouped_gemms(const GemmOperands& g, const at::Tensor& ends) {
  const auto input = g.input.detach().requires_grad_(true), hidden = g.hidden.detach().requires_grad_(true);
  const auto w1 = g.gate_up.detach().requires_grad_(true), w2 = g.down.detach().requires_grad_(true);
  synchronize(input.device());
  const double start = now();
  const auto projected = moe::grouped_linear(input, w1, ends);  // [pairs, 2 · intermediate]
  const auto out = moe::grouped_linear(hidden, w2, ends);       // [pairs, hidden]
  torch::autograd::backward({projected, out}, {g.upstream_gate_up, g.upstream_down});
  synchronize(input.device());
  return now() - start;
}

// One forward and backward of the experts' half of the layer.
double run_experts(const Shape& s, Experts& x, const at::Tensor& tokens, const at::Tensor& indices,
                   const at::Tensor& weights, const at::Tensor& upstream, bool grouped) {
  for (auto& l : x.leaves) l.mutable_grad() = at::Tensor();
  const auto input_tokens = tokens.detach().requires_grad_(true);
  synchronize(tokens.device());
  const double start = now();
  const auto routed = moe::route_pairs(indices, weights, s.experts);
  const auto input = input_tokens.index_select(0, routed.token);
  at::Tensor y;
  if (s.clamped) {
    y = grouped ? moe::clamped_experts_grouped(input, routed, x.clamped) : moe::clamped_experts_loop(input, routed, x.clamped);
  } else {
    y = grouped ? moe::swiglu_experts_grouped(input, routed, x.gate, x.up, x.down)
                : moe::swiglu_experts_loop(input, routed, x.gate, x.up, x.down);
  }
  moe::combine_pairs(y, routed, s.top_k).backward(upstream);
  synchronize(tokens.device());
  return now() - start;
}

// The same FLOPs as plain products: every pair through one expert's weights.
double run_dense(const Shape& s, const at::Tensor& pairs_input, const at::Tensor& gate_up, const at::Tensor& down,
                 const at::Tensor& upstream_pairs) {
  const auto input = pairs_input.detach().requires_grad_(true);
  const auto w1 = gate_up.detach().requires_grad_(true), w2 = down.detach().requires_grad_(true);
  synchronize(input.device());
  const double start = now();
  const auto projected = at::mm(input, w1.t());
  const auto hidden = at::silu(projected.narrow(1, 0, s.intermediate)) * projected.narrow(1, s.intermediate, s.intermediate);
  at::mm(hidden, w2.t()).backward(upstream_pairs);
  synchronize(input.device());
  return now() - start;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"MoE experts: grouped products against the per-expert loop and a dense product"};
  std::vector<std::string> shapes{"qwen3", "gpt-oss"};
  std::vector<int64_t> sizes{4096, 16384};
  int rounds = 3, threads = static_cast<int>(std::thread::hardware_concurrency());
  std::string dtype = "fp32", device_name = "cpu";
  app.add_option("--shapes", shapes, "qwen3 (Qwen3-30B-A3B's experts), gpt-oss (GPT-OSS-20B's)")->delimiter(',');
  app.add_option("--tokens", sizes, "tokens per layer call")->delimiter(',');
  app.add_option("--rounds", rounds, "interleaved rounds (median)")->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--device", device_name, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--threads", threads, "LibTorch threads")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(threads);
  const at::Device device(device_name == "cuda" ? at::kCUDA : at::kCPU);
  const auto options = at::TensorOptions().device(device).dtype(dtype == "bf16" ? at::kBFloat16 : at::kFloat);
  std::printf("bench_moe_layer: %s, %d LibTorch thread(s), CPU capability %s, device %s, %s\n", bench::cpu_model().c_str(),
              at::get_num_threads(), at::get_cpu_capability().c_str(), device.str().c_str(), dtype.c_str());
  const std::map<std::string, Shape> known{{"qwen3", {"Qwen3-30B-A3B", 128, 8, 2048, 768, false}},
                                           {"gpt-oss", {"GPT-OSS-20B", 32, 4, 2880, 2880, true}}};
  for (const auto& key : shapes) {
    const auto found = known.find(key);
    if (found == known.end()) {
      std::fprintf(stderr, "bench_moe_layer: unknown shape '%s' (qwen3, gpt-oss)\n", key.c_str());
      return 2;
    }
    const Shape& s = found->second;
    at::manual_seed(1);
    auto experts = make_experts(s, options);
    for (const int64_t n : sizes) {
      const auto tokens = at::randn({n, s.hidden}, options);
      const auto logits = at::randn({n, s.experts}, options.dtype(at::kFloat));
      auto [top, indices] = logits.topk(s.top_k, -1);
      const auto weights = at::softmax(top, -1).to(options.dtype());
      const auto upstream = at::randn({n, s.hidden}, options);
      const int64_t pairs = n * s.top_k;
      const auto pairs_input = at::randn({pairs, s.hidden}, options);
      const auto dense_gate_up = at::randn({2 * s.intermediate, s.hidden}, options) / std::sqrt(double(s.hidden));
      const auto dense_down = at::randn({s.hidden, s.intermediate}, options) / std::sqrt(double(s.intermediate));
      const auto upstream_pairs = at::randn({pairs, s.hidden}, options);
      const double flops = 3.0 * 6.0 * static_cast<double>(pairs) * static_cast<double>(s.hidden * s.intermediate);
      // The grouped products' operands: [experts, 2 · intermediate, hidden] and [experts, hidden,
      // intermediate], as views of the experts' own weights where the plugin makes them so.
      const auto routed = moe::route_pairs(indices, weights, s.experts);
      GemmOperands gemm;
      {
        const at::NoGradGuard plain;
        if (s.clamped) {
          gemm.gate_up = experts.clamped.gate_up.transpose(1, 2);
          gemm.down = experts.clamped.down.transpose(1, 2);
        } else {
          std::vector<at::Tensor> gate_up;
          for (int64_t e = 0; e < s.experts; ++e) {
            gate_up.push_back(experts.gate[static_cast<size_t>(e)]);
            gate_up.push_back(experts.up[static_cast<size_t>(e)]);
          }
          gemm.gate_up = superoffload::model::stacked_weights(gate_up, 2);
          gemm.down = superoffload::model::stacked_weights(experts.down, 1);
        }
        gemm.input = pairs_input;
        gemm.hidden = at::randn({pairs, s.intermediate}, options);
        gemm.upstream_gate_up = at::randn({pairs, 2 * s.intermediate}, options);
        gemm.upstream_down = upstream_pairs;
      }
      std::map<std::string, std::vector<double>> seconds;
      auto grouped_with = [&](const char* kernel) {
        setenv("SUPEROFFLOAD_MOE_GROUPED_MM", kernel, 1);
        const double t = run_experts(s, experts, tokens, indices, weights, upstream, true);
        unsetenv("SUPEROFFLOAD_MOE_GROUPED_MM");
        return t;
      };
      // A warm-up of each, then rounds in rotating order.
      run_experts(s, experts, tokens, indices, weights, upstream, false);
      grouped_with("library");
      grouped_with("loop");
      run_dense(s, pairs_input, dense_gate_up, dense_down, upstream_pairs);
      if (device.is_cuda()) run_grouped_gemms(gemm, routed.ends);
      for (int r = 0; r < rounds; ++r) {
        for (int k = 0; k < 5; ++k) {
          switch ((k + r) % 5) {
            case 0: seconds["loop"].push_back(run_experts(s, experts, tokens, indices, weights, upstream, false)); break;
            case 1: seconds["grouped/library"].push_back(grouped_with("library")); break;
            case 2: seconds["grouped/loop"].push_back(grouped_with("loop")); break;
            case 3:
              if (device.is_cuda()) seconds["grouped GEMMs"].push_back(run_grouped_gemms(gemm, routed.ends));
              break;
            default: seconds["dense"].push_back(run_dense(s, pairs_input, dense_gate_up, dense_down, upstream_pairs));
          }
        }
      }
      std::printf("%s experts, %lld tokens (%lld pairs), forward + backward, median of %d:\n", s.name.c_str(),
                  static_cast<long long>(n), static_cast<long long>(pairs), rounds);
      std::map<std::string, double> median;
      for (const char* row : {"loop", "grouped/library", "grouped/loop", "grouped GEMMs", "dense"}) {
        if (seconds[row].empty()) continue;
        median[row] = bench::median(seconds[row]);
        std::printf("  %-16s %9.1f ms  %7.3f TFLOPS (active)\n", row, 1000 * median[row], flops / median[row] / 1e12);
      }
      const double best_grouped = std::min(median["grouped/library"], median["grouped/loop"]);
      // On a GPU, gemms/dense: the grouped kernel's own efficiency against plain products;
      // gemms_share: the part of the grouped layer's time (LibTorch's kernel, as a GPU runs it)
      // its products take — the rest is routing, gathers, the activation and the weighted sum.
      std::printf("summary: %s tokens=%lld grouped/loop=%.2fx (library %.2fx, per-group %.2fx) grouped/dense=%.2f",
                  key.c_str(), static_cast<long long>(n), median["loop"] / best_grouped,
                  median["loop"] / median["grouped/library"], median["loop"] / median["grouped/loop"],
                  median["dense"] / best_grouped);
      if (median.count("grouped GEMMs")) {
        std::printf(" gemms/dense=%.2f gemms_share=%.2f", median["dense"] / median["grouped GEMMs"],
                    median["grouped GEMMs"] / median["grouped/library"]);
      }
      std::printf("\n");
    }
  }
  return 0;
}
