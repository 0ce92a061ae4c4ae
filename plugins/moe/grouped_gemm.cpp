// stacked_experts, grouped_linear and grouped_mm.
#include "grouped_gemm.hpp"

#include <torch/autograd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "base/error.hpp"

namespace superoffload::plugins::moe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Per device type and dtype: LibTorch's grouped kernel refused these operands once; from then
// on they go the per-group way without asking again (and without a second warning).
std::atomic<bool> g_refused[static_cast<size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES)]
                           [static_cast<size_t>(c10::ScalarType::NumOptions)];
std::atomic<bool>& refused(const at::Tensor& t) {
  return g_refused[static_cast<size_t>(t.device().type())][static_cast<size_t>(t.scalar_type())];
}

// How the CPU multiplies the groups (bench/bench_moe_layer measures both): "library" is
// at::_grouped_mm's CPU kernel, "loop" a product per group. SUPEROFFLOAD_MOE_GROUPED_MM
// overrides it on every device (for the benchmark and the tests).
enum class Kernel { library, loop };
Kernel kernel_for(const at::Tensor& a) {
  if (const char* forced = std::getenv("SUPEROFFLOAD_MOE_GROUPED_MM")) {
    if (std::strcmp(forced, "loop") == 0) return Kernel::loop;
    if (std::strcmp(forced, "library") == 0) return Kernel::library;
  }
  if (refused(a).load(std::memory_order_relaxed)) return Kernel::loop;
  return a.is_cpu() ? Kernel::loop : Kernel::library;
}

// A product per group, reading the groups' ends on the host once.
at::Tensor looped_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& ends) {
  const auto host_ends = ends.to(at::kCPU, at::kLong);
  const auto* end = host_ends.const_data_ptr<int64_t>();
  const int64_t groups = host_ends.numel();
  if (b.dim() == 3) {  // rows of a in groups, one matrix of b each
    auto out = at::empty({a.size(0), b.size(2)}, a.options());
    int64_t start = 0;
    for (int64_t g = 0; g < groups; ++g) {
      if (end[g] > start) {
        auto rows = out.narrow(0, start, end[g] - start);
        at::mm_out(rows, a.narrow(0, start, end[g] - start), b[g]);
      }
      start = end[g];
    }
    return out;
  }
  auto out = at::empty({groups, a.size(0), b.size(1)}, a.options());  // columns of a in groups
  int64_t start = 0;
  for (int64_t g = 0; g < groups; ++g) {
    if (end[g] > start) {
      auto group = out[g];
      at::mm_out(group, a.narrow(1, start, end[g] - start), b.narrow(0, start, end[g] - start));
    } else {
      out[g].zero_();  // an expert no row was routed to has a zero gradient
    }
    start = end[g];
  }
  return out;
}

// Expert after expert at one stride, each expert's projections adjacent, in one storage: the
// operand is a view of it. On a GPU also 16-byte aligned, as the grouped kernel needs.
bool evenly_laid_out(const std::vector<at::Tensor>& w, int64_t parts, int64_t rows, int64_t& stride) {
  const auto& first = w.front();
  const int64_t experts = static_cast<int64_t>(w.size()) / parts;
  const int64_t in = first.size(1);
  stride = experts > 1 ? w[static_cast<size_t>(parts)].storage_offset() - first.storage_offset() : rows * in;
  if (stride < rows * in) return false;
  for (int64_t e = 0; e < experts; ++e) {
    int64_t offset = first.storage_offset() + e * stride;
    for (int64_t p = 0; p < parts; ++p) {
      const auto& t = w[static_cast<size_t>(e * parts + p)];
      if (!t.is_contiguous() || !t.storage().is_alias_of(first.storage()) || t.storage_offset() != offset ||
          t.scalar_type() != first.scalar_type() || t.size(1) != in) {
        return false;
      }
      offset += t.numel();
    }
  }
  if (first.is_cuda()) {
    const auto item = static_cast<int64_t>(first.element_size());
    if (reinterpret_cast<uintptr_t>(first.const_data_ptr()) % 16 != 0 || (stride * item) % 16 != 0 || (in * item) % 16 != 0) {
      return false;
    }
  }
  return true;
}

struct StackExperts : torch::autograd::Function<StackExperts> {
  static at::Tensor forward(AutogradContext* ctx, at::TensorList weights, int64_t parts) {
    std::vector<at::Tensor> w(weights.begin(), weights.end());
    const int64_t experts = static_cast<int64_t>(w.size()) / parts;
    std::vector<int64_t> out_sizes;
    for (int64_t p = 0; p < parts; ++p) out_sizes.push_back(w[static_cast<size_t>(p)].size(0));
    const int64_t rows = std::accumulate(out_sizes.begin(), out_sizes.end(), int64_t{0});
    const int64_t in = w.front().size(1);
    ctx->saved_data["out_sizes"] = out_sizes;
    int64_t stride = 0;
    if (evenly_laid_out(w, parts, rows, stride)) {
      // A new tensor on the same storage (not an autograd view of the first weight: the
      // gradient goes to every weight, through backward below).
      return at::empty({0}, w.front().options()).set_(w.front().storage(), w.front().storage_offset(), {experts, rows, in},
                                                      {stride, in, 1});
    }
    std::vector<at::Tensor> per_expert;
    for (int64_t e = 0; e < experts; ++e) {
      std::vector<at::Tensor> projections(w.begin() + e * parts, w.begin() + (e + 1) * parts);
      per_expert.push_back(at::cat(projections, 0));
    }
    return at::stack(per_expert, 0);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto out_sizes = ctx->saved_data["out_sizes"].toIntVector();
    const auto& g = grads[0];
    const int64_t parts = static_cast<int64_t>(out_sizes.size());
    variable_list out;
    for (int64_t e = 0; e < g.size(0); ++e) {
      int64_t row = 0;
      for (int64_t p = 0; p < parts; ++p) {
        out.push_back(g[e].narrow(0, row, out_sizes[static_cast<size_t>(p)]));
        row += out_sizes[static_cast<size_t>(p)];
      }
    }
    out.emplace_back();  // parts
    return out;
  }
};

struct GroupedLinear : torch::autograd::Function<GroupedLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& ends) {
    ctx->save_for_backward({x, weight, ends});
    return grouped_mm(x, weight.transpose(1, 2), ends);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &ends = saved[2];
    const auto dy = grads[0].contiguous();  // the kernels want dense rows
    at::Tensor dx, dweight;
    if (ctx->needs_input_grad(0)) dx = grouped_mm(dy, weight, ends);                 // [rows, out]·[E, out, in]
    if (ctx->needs_input_grad(1)) dweight = grouped_mm(dy.t(), x, ends);             // [out, rows]·[rows, in]
    return {dx, dweight, at::Tensor()};
  }
};

}  // namespace

at::Tensor grouped_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& ends) {
  if (kernel_for(a) == Kernel::loop) return looped_mm(a, b, ends);
  try {
    return at::_grouped_mm(a, b, ends);
  } catch (const c10::Error& e) {
    if (!refused(a).exchange(true)) {
      std::fprintf(stderr, "moe plugin: at::_grouped_mm refused %s %s operands (%s); their experts are multiplied "
                   "one group at a time, with one read of the group ends per product\n",
                   c10::DeviceTypeName(a.device().type()).c_str(), c10::toString(a.scalar_type()),
                   e.what_without_backtrace());
    }
    return looped_mm(a, b, ends);
  }
}

at::Tensor stacked_experts(const std::vector<at::Tensor>& weights, int64_t parts) {
  SO_CHECK(parts >= 1 && !weights.empty() && static_cast<int64_t>(weights.size()) % parts == 0,
           "stacked_experts: " << weights.size() << " weights are not a whole number of experts of " << parts
                               << " projections");
  return StackExperts::apply(at::TensorList(weights), parts);
}

at::Tensor grouped_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& ends) {
  return GroupedLinear::apply(x, weight, ends);
}

}  // namespace superoffload::plugins::moe
