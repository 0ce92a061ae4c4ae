// One layer under ZeRO-3: this rank's shard of its flat parameters on the device, the
// gathered full buffer while the layer runs (its parameters are views into it), and this
// rank's fp32 gradient shard, accumulated over micro-batches — on the device for the part a
// device optimizer steps, in host memory for the part the CPU steps (place_gradient).
//
// With one rank nothing is communicated or staged: the shard is the gathered buffer (the
// parameters are views of it). An
// optimizer may keep its state in the shard itself (shard(), then shard_updated()).
//
// Under expert parallelism (zero/expert_parallel.hpp) a mixture-of-experts layer is partitioned
// in two regions: its shared parameters (attention, router, norms) across every rank, and the
// experts this rank computes across their replicas only; the other experts' parameters are
// neither held nor gathered. The rank's shard is the two regions' shards back to back, and
// shard_pieces() says where each element belongs in the layer's full layout (layout(), which
// checkpoints keep: the same whatever the partitioning).
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

class ExpertParallel;

// One part of a layer's parameters, partitioned over one communicator (FlatLayout's rules).
struct LayerRegion {
  FlatLayout layout;                  // its slots: the tensors as bound (a stacked expert tensor: this rank's rows)
  std::vector<size_t> parameter;      // each slot's parameter of the layer (index into layout().parameters())
  std::vector<int64_t> first_element; // where the slot starts in that parameter's full tensor
  comm::Communicator* comm = nullptr;
  int64_t shard_offset = 0;           // where the region's shard starts in the layer's shard
  int64_t gathered_offset = 0;        // where its elements start in the gathered buffer
  bool in_place() const { return comm->size() == 1; }  // gathered = its shard
};

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
  //
  // With `filled_later` (a resume), neither: the shard is made where it stays, in the compute
  // dtype on `device`, and left for set_shard to write (on the host its pages are made
  // resident on the rank's threads; a GPU run makes no host copy of it at all).
  using ShardFiller = std::function<void(const std::vector<ShardPiece>& pieces, at::Tensor& shard)>;
  PartitionedLayer(std::shared_ptr<model::Layer> layer, comm::Communicator& comm, BufferCache& buffers,
                   at::ScalarType compute_dtype, at::Device device, bool persistent,
                   const std::function<bool(const std::string&)>& decays, const ShardFiller& fill_shard = nullptr,
                   const ExpertParallel* expert_parallel = nullptr, bool filled_later = false);

  model::Layer& layer() { return *layer_; }
  // Every parameter of the layer in its canonical flat order (checkpoints, export): the same
  // whatever the partitioning. Its shard_numel() is this rank's only without expert parallelism.
  const FlatLayout& layout() const { return layout_; }
  const std::vector<LayerRegion>& regions() const { return regions_; }
  // This rank's shard: its length, and its pieces of the layer's parameters in shard order
  // (ShardPiece::parameter indexes layout().parameters(), parameter_offset counts in the full
  // tensor); elements in no piece are padding (0).
  int64_t shard_numel() const { return shard_numel_; }
  const std::vector<ShardPiece>& shard_pieces() const { return pieces_; }
  // Elements a gather of the layer brings in (its regions over more than one rank).
  int64_t gathered_numel() const { return gathered_numel_; }
  bool persistent() const { return persistent_; }
  bool live() const { return gathered_.defined(); }
  bool gathering() const { return gathering_buffer_.defined(); }
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
  // One rank (per region): gathering is binding the parameters to the shard (no buffer, no collective).
  bool gathers_in_place() const { return gathered_numel_ == 0; }

  void gather_async();   // starts the all-gather (no-op when live or already gathering)
  void wait_gathered();  // completes it and binds the parameters to views of the buffer
  void release();        // unbinds the parameters and frees the buffer (not for persistent layers)

  // Where this rank's reduced fp32 gradient lives. Elements [0, split) of the shard: on the
  // device, grad_shard(). Elements [split, shard): in `host`, host memory of an optimizer that
  // steps them on the CPU (pinned on a GPU run), host_grad(). Without a call: all on the device.
  // Call before the first backward.
  void place_gradient(int64_t split, at::Tensor host);
  int64_t gradient_split() const { return grad_split_; }
  // The accumulated device part [split] and host part [shard - split] (storage never changes once
  // the first call allocated the device part).
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
  // The constructor's shard from `fill_shard`, else from the layer's parameters.
  void fill_shard_from(const ShardFiller& fill_shard);
  void bind_views();
  void unbind();
  void drop_gathered();  // the gathered buffer back to the cache (unbound first)

  std::shared_ptr<model::Layer> layer_;
  comm::Communicator& comm_;
  BufferCache* buffers_;
  FlatLayout layout_;
  std::vector<LayerRegion> regions_;
  std::vector<ShardPiece> pieces_;
  int64_t shard_numel_ = 0, gathered_numel_ = 0;
  std::vector<at::Tensor> parameters_;  // the layer's Parameter variables, in layout order
  at::Tensor device_shard_;             // [shard] compute dtype
  at::Tensor gathered_;                 // [padded] compute dtype, while live
  at::Tensor gathering_buffer_;         // the buffer an all-gather in flight writes
  at::Tensor grad_shard_;               // [split] fp32, on the device; undefined until first used
  at::Tensor host_grad_;                // [shard - split] fp32, host memory (empty: none)
  int64_t grad_split_ = 0;
  bool grad_stale_ = true;              // the gradient holds an earlier step's values: overwrite
  std::vector<std::unique_ptr<comm::Work>> pending_;
  bool persistent_;
  at::TensorOptions options_;
};

comm::DataType comm_type(at::ScalarType type);

}  // namespace superoffload::zero
