// over_tiles: a custom autograd function that recomputes tile by tile in backward.
#include "model/blocks/token_tiles.hpp"

#include <torch/autograd.h>

#include <algorithm>
#include <utility>

#include "base/error.hpp"

namespace superoffload::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The computation and how the inputs divide, carried from forward to backward.
struct TileHolder : torch::CustomClassHolder {
  TileHolder(TileFunction f, size_t tiled, int64_t d, int64_t t) : fn(std::move(f)), tiled_count(tiled), dim(d), tile(t) {}
  TileFunction fn;
  size_t tiled_count;
  int64_t dim, tile;
};

std::vector<at::Tensor> tiles_of(const std::vector<at::Tensor>& tiled, int64_t dim, int64_t begin, int64_t length) {
  std::vector<at::Tensor> tiles;
  tiles.reserve(tiled.size());
  for (const auto& input : tiled) tiles.push_back(input.narrow(dim, begin, length));
  return tiles;
}

// Each tile's output goes straight into its place in the whole one: collected and joined with
// at::cat, the whole output existed twice at the end of the pass (the forward's peak of a
// tiled block at long rows, where one tile's intermediates are small beside a hidden state).
at::Tensor run_tiles(const std::vector<at::Tensor>& tiled, const std::vector<at::Tensor>& whole, int64_t dim,
                     int64_t tile, const TileFunction& fn) {
  const int64_t extent = tiled.front().size(dim);
  at::Tensor output;
  for (int64_t begin = 0; begin < extent; begin += tile) {
    const int64_t length = std::min(tile, extent - begin);
    const auto part = fn(tiles_of(tiled, dim, begin, length), whole, begin);
    if (!output.defined()) {
      SO_CHECK(dim < part.dim(), "over_tiles: a tile's output of shape " << part.sizes() << " has no dimension " << dim);
      auto sizes = part.sizes().vec();
      sizes[static_cast<size_t>(dim)] = extent;
      output = at::empty(sizes, part.options());
    }
    auto place = output.narrow(dim, begin, length);
    SO_CHECK(part.sizes() == place.sizes(), "over_tiles: the tile at " << begin << " gave an output of shape "
                                                << part.sizes() << " where " << place.sizes() << " belongs");
    place.copy_(part);
  }
  return output;
}

struct TiledFunction : torch::autograd::Function<TiledFunction> {
  // `inputs`: the tiled ones, then the whole ones.
  static at::Tensor forward(AutogradContext* ctx, at::TensorList inputs, const c10::intrusive_ptr<TileHolder>& holder) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["holder"] = c10::IValue::make_capsule(holder);
    const auto all = inputs.vec();
    const auto split = all.begin() + static_cast<std::ptrdiff_t>(holder->tiled_count);
    return run_tiles({all.begin(), split}, {split, all.end()}, holder->dim, holder->tile, holder->fn);  // no graph
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto inputs = ctx->get_saved_variables();
    const auto holder = c10::static_intrusive_pointer_cast<TileHolder>(ctx->saved_data["holder"].toCapsule());
    const size_t tiled_count = holder->tiled_count;
    const int64_t dim = holder->dim, tile = holder->tile;
    const auto& grad = grad_outputs.at(0);
    variable_list grads(inputs.size() + 1);  // and none for the holder
    std::vector<bool> wanted(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      wanted[i] = ctx->needs_input_grad(i) && at::isFloatingType(inputs[i].scalar_type());
    }
    if (!grad.defined()) return grads;
    // Whole inputs: one leaf each for all tiles, whose gradient sums over them.
    std::vector<at::Tensor> whole;
    for (size_t i = tiled_count; i < inputs.size(); ++i) {
      whole.push_back(inputs[i].detach());
      if (wanted[i]) whole.back().requires_grad_(true);
    }
    for (size_t i = 0; i < tiled_count; ++i) {
      if (wanted[i]) grads[i] = at::empty_like(inputs[i]);
    }
    const std::vector<at::Tensor> tiled(inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(tiled_count));
    const int64_t extent = tiled.front().size(dim);
    for (int64_t begin = 0; begin < extent; begin += tile) {
      const int64_t length = std::min(tile, extent - begin);
      auto tiles = tiles_of(tiled, dim, begin, length);
      for (size_t i = 0; i < tiles.size(); ++i) {
        tiles[i] = tiles[i].detach();
        if (wanted[i]) tiles[i].requires_grad_(true);
      }
      at::Tensor output;
      {
        const torch::AutoGradMode with_graph(true);
        output = holder->fn(tiles, whole, begin);
      }
      // Parameters' and whole inputs' gradients accumulate here, one tile after another.
      torch::autograd::backward({output}, {grad.narrow(dim, begin, length)});
      for (size_t i = 0; i < tiles.size(); ++i) {
        if (!wanted[i]) continue;
        auto target = grads[i].narrow(dim, begin, length);
        if (tiles[i].grad().defined()) {
          target.copy_(tiles[i].grad());
        } else {
          target.zero_();  // this tile's output does not depend on it
        }
      }
    }
    for (size_t i = tiled_count; i < inputs.size(); ++i) {
      if (!wanted[i]) continue;
      const auto& leaf = whole[i - tiled_count];
      grads[i] = leaf.grad().defined() ? leaf.grad() : at::zeros_like(inputs[i]);
    }
    return grads;
  }
};

}  // namespace

at::Tensor over_tiles(const std::vector<at::Tensor>& tiled, const std::vector<at::Tensor>& whole, int64_t dim,
                      int64_t tile, TileFunction fn) {
  SO_CHECK(!tiled.empty(), "over_tiles: no tiled inputs");
  const int64_t extent = tiled.front().size(dim);
  for (const auto& input : tiled) {
    SO_CHECK(input.defined() && input.size(dim) == extent,
             "over_tiles: every tiled input needs " << extent << " entries along dimension " << dim);
  }
  for (const auto& input : whole) SO_CHECK(input.defined(), "over_tiles: an undefined whole input");
  if (tile <= 0 || tile >= extent) return fn(tiled, whole, 0);
  if (!at::GradMode::is_enabled()) return run_tiles(tiled, whole, dim, tile, fn);
  // The recompute's gradients reach the parameters only through an input that needs one (the
  // autograd function runs only then): without such an input, untiled.
  bool input_needs_grad = false;
  for (const auto& input : tiled) input_needs_grad |= input.requires_grad();
  for (const auto& input : whole) input_needs_grad |= input.requires_grad();
  if (!input_needs_grad) return fn(tiled, whole, 0);
  std::vector<at::Tensor> all(tiled);
  all.insert(all.end(), whole.begin(), whole.end());
  return TiledFunction::apply(at::TensorList(all), c10::make_intrusive<TileHolder>(std::move(fn), tiled.size(), dim, tile));
}

at::Tensor over_token_tiles(const std::vector<at::Tensor>& inputs, int64_t tile_tokens, TokenwiseFunction fn) {
  return over_tiles(inputs, {}, 0, tile_tokens,
                    [fn = std::move(fn)](const std::vector<at::Tensor>& tiles, const std::vector<at::Tensor>&, int64_t) {
                      return fn(tiles);
                    });
}

at::Tensor over_token_tiles(const at::Tensor& x, int64_t tile_tokens, std::function<at::Tensor(const at::Tensor&)> mlp) {
  return over_token_tiles({x.reshape({-1, x.size(-1)})}, tile_tokens,
                          [mlp = std::move(mlp)](const std::vector<at::Tensor>& tile) { return mlp(tile[0]); })
      .view(x.sizes());
}

}  // namespace superoffload::model
