// One layer under ZeRO-3: this rank's shard of its flat parameters on the device, the
// gathered full buffer while the layer runs (its parameters are views into it), and this
// rank's fp32 gradient shard, accumulated over micro-batches — on the device for the part a
// device optimizer steps, in host memory for the part the CPU steps (place_gradient).
//
// With one rank nothing is communicated or staged: the shard is the gathered buffer (the
// parameters are views of it). An
// optimizer may keep its state in the shard itself (shard(), then shard_updated()).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "model/causal_lm.hpp"
#include "zero/buffer_cache.hpp"
#include "zero/flat_layout.hpp"

namespace superoffload::zero {

class PartitionedLayer {
 public:
  // Takes the layer's current (full) parameter values, keeps this rank's shard in
  // `compute_dtype` on `device`, and unbinds the parameters (the full copy is freed).
  // `persistent` layers stay gathered for the whole run. `decays` says by HF name which
  // parameters take weight decay (CausalLM::decays).
  // Gathered and gradient buffers come from (and go back to) `buffers`, which must outlive it.
  //
  // With `fill_shard`, the full values are never read: it writes this rank's pieces of the
  // parameters (FlatLayout::pieces) into an fp32 shard buffer, zeros elsewhere (the padding),
  // e.g. straight from the bytes of a safetensors file that hold them.
  using ShardFiller = std::function<void(const std::vector<ShardPiece>& pieces, at::Tensor& shard)>;
  PartitionedLayer(std::shared_ptr<model::Layer> layer, comm::Communicator& comm, BufferCache& buffers,
                   at::ScalarType compute_dtype, at::Device device, bool persistent,
                   const std::function<bool(const std::string&)>& decays, const ShardFiller& fill_shard = nullptr);

  model::Layer& layer() { return *layer_; }
  const FlatLayout& layout() const { return layout_; }
  bool persistent() const { return persistent_; }
  bool live() const { return gathered_.defined(); }
  bool gathering() const { return pending_ != nullptr; }
  at::ScalarType compute_dtype() const { return options_.dtype().toScalarType(); }
  at::Device device() const { return options_.device(); }

  // This rank's fp32 values of its shard (for the optimizer's master copy).
  at::Tensor shard_fp32() const { return device_shard_.to(at::kFloat); }
  // This rank's shard itself, [shard] in the compute dtype on the device: an optimizer that
  // writes its updated weights here calls shard_updated() after the step.
  at::Tensor shard() const { return device_shard_; }
  // Replaces this rank's shard (after an optimizer step); a live layer is updated too.
  // `values` may be shard() itself (nothing is copied).
  void set_shard(const at::Tensor& values);
  // After shard() was written in place: a live layer that holds a gathered copy gathers again.
  void shard_updated();
  // One rank: gathering is binding the parameters to the shard (no buffer, no collective).
  bool gathers_in_place() const { return comm_.size() == 1; }

  void gather_async();   // starts the all-gather (no-op when live or already gathering)
  void wait_gathered();  // completes it and binds the parameters to views of the buffer
  void release();        // unbinds the parameters and frees the buffer (not for persistent layers)

  // Where this rank's reduced fp32 gradient lives. Elements [0, split) of the shard: on the
  // device, grad_shard(). Elements [split, shard): in `host`, host memory of an optimizer that
  // steps them on the CPU (pinned on a GPU run), host_grad(). Without a call: all on the device.
  // Call before the first backward.
  void place_gradient(int64_t split, at::Tensor host);
  int64_t gradient_split() const { return grad_split_; }
  // The accumulated device part [split] and host part [shard - split] (storage never changes).
  at::Tensor& grad_shard();
  at::Tensor& host_grad();
  // The next reduction overwrites the gradient instead of adding to it (no zeroing pass;
  // grad_shard()/host_grad() zero it if read before).
  void zero_grad_shard() { grad_stale_ = true; }
  // For the reducer (zero/gradient_reducer.hpp): true once per step, for the first micro-batch's
  // reduction (which writes; later ones add); then the stored gradient counts as current.
  bool begin_reduction();
  // The parameters' gradients, in layout order (undefined where a parameter got none, e.g. an
  // expert no token was routed to), and a way to drop them once they are flattened.
  std::vector<at::Tensor> gradients() const;
  void clear_gradients();

  // Elements this rank holds on the device now: its shard, plus the gathered buffer if live.
  int64_t resident_numel() const;

 private:
  void bind_views();
  void unbind();
  void drop_gathered();  // the gathered buffer back to the cache (unbound first)

  std::shared_ptr<model::Layer> layer_;
  comm::Communicator& comm_;
  BufferCache* buffers_;
  FlatLayout layout_;
  std::vector<at::Tensor> parameters_;  // the layer's Parameter variables, in layout order
  at::Tensor device_shard_;             // [shard] compute dtype
  at::Tensor gathered_;                 // [padded] compute dtype, while live
  at::Tensor gathering_buffer_;         // the buffer an all-gather in flight writes
  at::Tensor grad_shard_;               // [split] fp32, on the device
  at::Tensor host_grad_;                // [shard - split] fp32, host memory (empty: none)
  int64_t grad_split_ = 0;
  bool grad_stale_ = true;              // the gradient holds an earlier step's values: overwrite
  std::unique_ptr<comm::Work> pending_;
  bool persistent_;
  at::TensorOptions options_;
};

comm::DataType comm_type(at::ScalarType type);

}  // namespace superoffload::zero
