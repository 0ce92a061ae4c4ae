// over_token_tiles: a custom autograd function that recomputes tile by tile in backward.
#include "model/blocks/token_tiles.hpp"

#include <torch/autograd.h>

#include <utility>

#include "base/error.hpp"

namespace superoffload::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The computation, carried from forward to backward in the autograd context.
struct TokenwiseHolder : torch::CustomClassHolder {
  explicit TokenwiseHolder(TokenwiseFunction f) : fn(std::move(f)) {}
  TokenwiseFunction fn;
};

std::vector<at::Tensor> tiles_of(const std::vector<at::Tensor>& inputs, int64_t begin, int64_t length) {
  std::vector<at::Tensor> tiles;
  tiles.reserve(inputs.size());
  for (const auto& input : inputs) tiles.push_back(input.narrow(0, begin, length));
  return tiles;
}

at::Tensor run_tiles(const std::vector<at::Tensor>& inputs, int64_t tile, const TokenwiseFunction& fn) {
  const int64_t tokens = inputs.front().size(0);
  std::vector<at::Tensor> outputs;
  for (int64_t begin = 0; begin < tokens; begin += tile) {
    outputs.push_back(fn(tiles_of(inputs, begin, std::min(tile, tokens - begin))));
  }
  return at::cat(outputs, 0);
}

struct TiledTokenwise : torch::autograd::Function<TiledTokenwise> {
  static at::Tensor forward(AutogradContext* ctx, at::TensorList inputs, int64_t tile,
                            const c10::intrusive_ptr<TokenwiseHolder>& holder) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["tile"] = tile;
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    return run_tiles(inputs.vec(), tile, holder->fn);  // no graph: autograd is off in forward
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto inputs = ctx->get_saved_variables();
    const int64_t tile = ctx->saved_data["tile"].toInt();
    const auto holder = c10::static_intrusive_pointer_cast<TokenwiseHolder>(ctx->saved_data["fn"].toCapsule());
    const auto& grad = grad_outputs.at(0);
    variable_list grads(inputs.size() + 2);  // and none for tile and fn
    std::vector<bool> wanted(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      wanted[i] = ctx->needs_input_grad(i) && at::isFloatingType(inputs[i].scalar_type());
      if (wanted[i]) grads[i] = at::empty_like(inputs[i]);
    }
    if (!grad.defined()) return grads;
    const int64_t tokens = inputs.front().size(0);
    for (int64_t begin = 0; begin < tokens; begin += tile) {
      const int64_t length = std::min(tile, tokens - begin);
      auto tiles = tiles_of(inputs, begin, length);
      for (size_t i = 0; i < tiles.size(); ++i) {
        tiles[i] = tiles[i].detach();
        if (wanted[i]) tiles[i].requires_grad_(true);
      }
      at::Tensor output;
      {
        const torch::AutoGradMode with_graph(true);
        output = holder->fn(tiles);
      }
      // Parameters' gradients accumulate into their .grad here, one tile after another.
      torch::autograd::backward({output}, {grad.narrow(0, begin, length)});
      for (size_t i = 0; i < tiles.size(); ++i) {
        if (!wanted[i]) continue;
        auto target = grads[i].narrow(0, begin, length);
        if (tiles[i].grad().defined()) {
          target.copy_(tiles[i].grad());
        } else {
          target.zero_();  // this tile's output does not depend on it
        }
      }
    }
    return grads;
  }
};

}  // namespace

at::Tensor over_token_tiles(const std::vector<at::Tensor>& inputs, int64_t tile_tokens, TokenwiseFunction fn) {
  SO_CHECK(!inputs.empty(), "over_token_tiles: no inputs");
  const int64_t tokens = inputs.front().size(0);
  for (const auto& input : inputs) {
    SO_CHECK(input.defined() && input.size(0) == tokens,
             "over_token_tiles: every input needs " << tokens << " rows (tokens) along dimension 0");
  }
  if (tile_tokens <= 0 || tile_tokens >= tokens) return fn(inputs);
  if (!at::GradMode::is_enabled()) return run_tiles(inputs, tile_tokens, fn);
  // The recompute's gradients reach the parameters only through an input that needs one (the
  // autograd function runs only then): without such an input, untiled.
  bool input_needs_grad = false;
  for (const auto& input : inputs) input_needs_grad |= input.requires_grad();
  if (!input_needs_grad) return fn(inputs);
  return TiledTokenwise::apply(at::TensorList(inputs), tile_tokens, c10::make_intrusive<TokenwiseHolder>(std::move(fn)));
}

}  // namespace superoffload::model
