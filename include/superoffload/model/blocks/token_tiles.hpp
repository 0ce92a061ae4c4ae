// A token-wise computation (an MLP, a mixture of experts) over tiles of tokens, so that its
// intermediate — tokens × intermediate, 3.5 GiB per tensor for one Llama-3.1-8B layer at 128k
// tokens — never exists for the whole sequence (DeepSpeed ALST's TiledMLP idea).
//
// Without gradients the tiles simply run one after another. With gradients, forward runs the
// tiles without building a graph and keeps only the inputs; backward recomputes each tile's
// forward with a graph, backpropagates that tile's share of the output gradient (parameter
// gradients accumulate as usual), and frees it before the next: one tile's intermediate at a
// time, for one more forward of the computation. The output equals the untiled computation's
// wherever each token's output depends on that token's inputs only (row-wise products, routed
// experts without capacity limits), to the round-off of products over fewer rows.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace superoffload::model {

// `fn` maps tiles of `inputs` (each [tokens, ...], sliced along dimension 0, all defined) to
// the tile's output [tile tokens, ...]. `tile_tokens` <= 0, or not fewer than the tokens: one
// call on the whole inputs, as if untiled. Inputs that are not floating point (routing indices)
// get no gradient.
using TokenwiseFunction = std::function<at::Tensor(const std::vector<at::Tensor>& tiles)>;
at::Tensor over_token_tiles(const std::vector<at::Tensor>& inputs, int64_t tile_tokens, TokenwiseFunction fn);

// An MLP's usual case: `x` [..., hidden] (a block's [batch, seq, hidden]) as one input of
// tokens, `mlp` mapping [tokens, hidden] to the same shape; the output has x's shape.
at::Tensor over_token_tiles(const at::Tensor& x, int64_t tile_tokens, std::function<at::Tensor(const at::Tensor&)> mlp);

// The general form: `tiled` inputs are cut along dimension `dim` into tiles of `tile` (the
// outputs are joined along it too); `whole` inputs go to every tile uncut, and their gradients
// sum over the tiles (attention: queries tiled, keys and values whole). `fn` also gets the
// tile's first index along `dim`.
using TileFunction = std::function<at::Tensor(const std::vector<at::Tensor>& tiles, const std::vector<at::Tensor>& whole,
                                              int64_t begin)>;
at::Tensor over_tiles(const std::vector<at::Tensor>& tiled, const std::vector<at::Tensor>& whole, int64_t dim,
                      int64_t tile, TileFunction fn);

}  // namespace superoffload::model
