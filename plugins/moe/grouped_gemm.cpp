// grouped_linear and grouped_mm.
#include "grouped_gemm.hpp"

#include <torch/autograd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

at::Tensor grouped_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& ends) {
  return GroupedLinear::apply(x, weight, ends);
}

}  // namespace superoffload::plugins::moe
