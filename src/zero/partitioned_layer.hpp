// One layer under ZeRO-3: this rank's shard of its flat parameters on the device, the
// gathered full buffer while the layer runs (its parameters are views into it), and this
// rank's fp32 gradient shard, accumulated over micro-batches.
//
// With one rank nothing is communicated or staged: the shard is the gathered buffer (the
// parameters are views of it) and gradients go straight into the gradient shard. An
// optimizer may keep its state in the shard itself (shard(), then shard_updated()).
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "comm/communicator.hpp"
#include "model/causal_lm.hpp"
#include "zero/buffer_cache.hpp"
#include "zero/flat_layout.hpp"

namespace superoffload::zero {

class PartitionedLayer {
 public:
  // Takes the layer's current (full) parameter values, keeps this rank's shard in
  // `compute_dtype` on `device`, and unbinds the parameters (the full copy is freed).
  // `persistent` layers stay gathered for the whole run.
  // Gathered and gradient buffers come from (and go back to) `buffers`, which must outlive it.
  PartitionedLayer(std::shared_ptr<model::Layer> layer, comm::Communicator& comm, BufferCache& buffers,
                   at::ScalarType compute_dtype, at::Device device, bool persistent);

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

  // Flattens the parameters' gradients (fp32, zero where a parameter got none), reduce-
  // scatters them (sum) and adds this rank's part to grad_shard(); clears the gradients.
  // Returns the seconds spent blocked on the collective.
  double reduce_gradients();
  // The accumulated gradient shard [shard] fp32 (its storage never changes).
  at::Tensor& grad_shard();
  // The next reduce_gradients() overwrites the shard instead of adding to it (no zeroing pass;
  // grad_shard() zeroes it if read before).
  void zero_grad_shard() { grad_stale_ = true; }

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
  at::Tensor grad_shard_;               // [shard] fp32
  bool grad_stale_ = true;              // grad_shard_ holds an earlier step's values: overwrite
  std::unique_ptr<comm::Work> pending_;
  bool persistent_;
  at::TensorOptions options_;
};

comm::DataType comm_type(at::ScalarType type);

}  // namespace superoffload::zero
