// stacked_in_place and stacked_weights: one autograd function for both.
#include "model/blocks/stacked_weights.hpp"

#include <torch/autograd.h>

#include "base/error.hpp"
#include "model/blocks/env_switch.hpp"

namespace superoffload::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Group after group at one stride, each group's parts adjacent, contiguous, in one storage, of
// one dtype and width: the stacked operand can be a view of that storage. On a GPU also 16-byte
// aligned (LibTorch's grouped GEMM needs it; cuBLAS runs its fast kernels on it).
bool evenly_laid_out(const std::vector<at::Tensor>& w, int64_t parts, int64_t rows, int64_t& stride) {
  const auto& first = w.front();
  const int64_t groups = static_cast<int64_t>(w.size()) / parts;
  const int64_t in = first.size(1);
  stride = groups > 1 ? w[static_cast<size_t>(parts)].storage_offset() - first.storage_offset() : rows * in;
  if (stride < rows * in) return false;
  for (int64_t g = 0; g < groups; ++g) {
    int64_t offset = first.storage_offset() + g * stride;
    for (int64_t p = 0; p < parts; ++p) {
      const auto& t = w[static_cast<size_t>(g * parts + p)];
      if (t.dim() != 2 || !t.is_contiguous() || !t.storage().is_alias_of(first.storage()) ||
          t.storage_offset() != offset || t.scalar_type() != first.scalar_type() || t.size(1) != in) {
        return false;
      }
      offset += t.numel();
    }
  }
  if (first.is_cuda()) {
    const auto item = static_cast<int64_t>(first.element_size());
    if (reinterpret_cast<uintptr_t>(first.const_data_ptr()) % 16 != 0 || (stride * item) % 16 != 0 ||
        (in * item) % 16 != 0) {
      return false;
    }
  }
  return true;
}

int64_t rows_per_group(const std::vector<at::Tensor>& w, int64_t parts) {
  int64_t rows = 0;
  for (int64_t p = 0; p < parts; ++p) rows += w[static_cast<size_t>(p)].size(0);
  return rows;
}

// forward: the stacked operand, [groups, rows, in] (`flat`: [rows, in], one group) — a view
// when laid out evenly, else a copy unless `in_place_only` (then undefined). backward: each
// weight's rows of the gradient, as views of it (no copy).
struct StackWeights : torch::autograd::Function<StackWeights> {
  static at::Tensor forward(AutogradContext* ctx, at::TensorList weights, int64_t parts, bool flat) {
    std::vector<at::Tensor> w(weights.begin(), weights.end());
    const int64_t groups = static_cast<int64_t>(w.size()) / parts;
    std::vector<int64_t> out_sizes;
    for (int64_t p = 0; p < parts; ++p) out_sizes.push_back(w[static_cast<size_t>(p)].size(0));
    ctx->saved_data["out_sizes"] = out_sizes;
    ctx->saved_data["flat"] = flat;
    const int64_t rows = rows_per_group(w, parts), in = w.front().size(1);
    int64_t stride = 0;
    if (evenly_laid_out(w, parts, rows, stride)) {
      // A new tensor on the same storage (not an autograd view of the first weight: the
      // gradient goes to every weight, through backward below).
      const auto& first = w.front();
      auto stacked = at::empty({0}, first.options());
      if (flat) return stacked.set_(first.storage(), first.storage_offset(), {rows, in}, {in, 1});
      return stacked.set_(first.storage(), first.storage_offset(), {groups, rows, in}, {stride, in, 1});
    }
    std::vector<at::Tensor> per_group;
    for (int64_t g = 0; g < groups; ++g) {
      per_group.push_back(at::cat(std::vector<at::Tensor>(w.begin() + g * parts, w.begin() + (g + 1) * parts), 0));
    }
    return flat ? per_group.front() : at::stack(per_group, 0);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto out_sizes = ctx->saved_data["out_sizes"].toIntVector();
    const bool flat = ctx->saved_data["flat"].toBool();
    const auto g = flat ? grads[0].unsqueeze(0) : grads[0];
    variable_list out;
    for (int64_t e = 0; e < g.size(0); ++e) {
      int64_t row = 0;
      for (const int64_t size : out_sizes) {
        out.push_back(g[e].narrow(0, row, size));
        row += size;
      }
    }
    out.emplace_back();  // parts
    out.emplace_back();  // flat
    return out;
  }
};

}  // namespace

bool fuses_projections(const at::Device&) {
  // Off by default on every device (measured slower on an H100 too: stacked_weights.hpp); "never"
  // is the default's name.
  return env_switch_is("SUPEROFFLOAD_FUSED_PROJECTIONS", "always");
}

at::Tensor stacked_in_place(const std::vector<at::Tensor>& weights) {
  if (weights.empty()) return {};
  const auto parts = static_cast<int64_t>(weights.size());
  int64_t stride = 0;
  for (const auto& w : weights) {
    if (!w.defined() || w.dim() != 2) return {};
  }
  if (!evenly_laid_out(weights, parts, rows_per_group(weights, parts), stride)) return {};
  return StackWeights::apply(at::TensorList(weights), parts, /*flat=*/true);
}

at::Tensor stacked_weights(const std::vector<at::Tensor>& weights, int64_t parts) {
  SO_CHECK(parts >= 1 && !weights.empty() && static_cast<int64_t>(weights.size()) % parts == 0,
           "stacked_weights: " << weights.size() << " weights are not a whole number of groups of " << parts
                               << " projections");
  return StackWeights::apply(at::TensorList(weights), parts, /*flat=*/false);
}

}  // namespace superoffload::model
