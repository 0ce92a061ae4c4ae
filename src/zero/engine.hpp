// The ZeRO-3 engine: runs a model layer by layer over partitioned parameters.
//
// Forward: for layer i, wait for its all-gather, start layer i+1's (prefetch, within the
// live-parameter budget), keep the layer's input (activation checkpointing), run it, release
// it. The head computes the loss chunk by chunk and its backward at once. Backward, in reverse:
// gather layer i (prefetch i−1), recompute its forward with grad, backpropagate the incoming
// gradient, start the reduce-scatter of the layer's gradient into each owner's fp32 shard
// (zero/gradient_reducer.hpp: in buckets, overlapped with the backward of the layers before),
// release, and — on the last micro-batch of a step — tell the optimizer as each layer's shard
// completes. The end of backward waits for the reductions still in flight.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "model/causal_lm.hpp"
#include "model/load_balancing.hpp"
#include "zero/activation_offload.hpp"
#include "zero/engine_stats.hpp"
#include "zero/expert_parallel.hpp"
#include "zero/gradient_reducer.hpp"
#include "zero/layer_profiler.hpp"
#include "zero/partitioned_layer.hpp"
#include "zero/sequence_parallel.hpp"

namespace superoffload::zero {

struct EngineOptions {
  at::ScalarType compute_dtype = at::kBFloat16;
  at::Device device = at::kCPU;
  bool activation_checkpointing = true;
  // Checkpointed layer inputs go to host memory in forward and come back one layer ahead of
  // their recompute (zero/activation_offload.hpp); needs activation_checkpointing.
  bool activation_offload = false;
  bool pin_activations = true;                  // page-locked host buffers on a GPU
  std::chrono::milliseconds activation_copy_delay{0};  // tests: every offload copy starts this late (CPU)
  int64_t max_live_parameters = 1'000'000'000;  // gathered elements resident at once (prefetch budget)
  int64_t prefetch_bucket_size = 50'000'000;    // a layer larger than this is not gathered ahead
  int64_t persistence_threshold = 100'000;      // layers smaller than this stay gathered
  int64_t reduce_bucket_size = 500'000'000;     // elements reduce-scattered at once (gradient_reducer.hpp)
  int64_t loss_chunk_tokens = 1024;
  // MLPs over tiles of this many tokens of a micro-batch (model::BatchContext::tile_tokens); 0: untiled.
  int64_t tile_tokens = 0;
  // Ulysses sequence parallelism (zero/sequence_parallel.hpp), owned by the caller and outliving
  // the engine; null: none. The engine is handed whole rows and keeps this rank's shard.
  const SequenceParallel* sequence_parallel = nullptr;
  // Expert parallelism (zero/expert_parallel.hpp), owned by the caller and outliving the
  // engine; null: every rank holds and computes every expert.
  const ExpertParallel* expert_parallel = nullptr;
  // A resume: every shard is written after construction (from the checkpoint, through
  // set_shard), so none is filled from the layers' parameters, which are left unfilled.
  bool shards_filled_later = false;
};

struct MicroBatchResult {
  double loss_sum = 0;      // sum of token losses of this rank's micro-batch (fp32)
  int64_t tokens = 0;       // tokens counted in it
  double aux_loss = 0;      // HF's MoE load-balancing aux_loss of this forward (unweighted), 0 without
};

class ZeroEngine {
 public:
  // `materialize` (optional) fills layer i just before it is partitioned (streaming set-up:
  // a rank holds its shards plus at most one full layer, never the whole model).
  // `fill_shard` (optional, instead) writes only this rank's pieces of layer i's parameters
  // into its fp32 shard buffer (PartitionedLayer::ShardFiller): no full layer ever exists.
  using LayerShardFiller =
      std::function<void(size_t layer, const std::vector<ShardPiece>& pieces, at::Tensor& shard)>;
  ZeroEngine(std::shared_ptr<model::CausalLM> model, comm::Communicator& comm, EngineOptions options,
             const std::function<void(size_t)>& materialize = nullptr, const LayerShardFiller& fill_shard = nullptr);

  // Under sequence parallelism every method below takes whole rows ([batch, seq]); the engine
  // runs this rank's shard of them, and the loss sums and token counts it returns are the
  // shard's (summed over all ranks they count each token once).
  //
  // Forward and backward of one micro-batch (tokens, labels [batch, seq], labels shifted with
  // model::kIgnoreLabel where nothing is predicted). `position_ids` [batch, seq]: packed
  // documents, each starting at 0, attend only within themselves; undefined: every row is one
  // sequence at positions 0, 1, ... Each token's loss is weighted by `loss_scale` (1 / tokens
  // of the global batch); the MoE load-balancing loss, times router_aux_loss_coef, by `aux_scale`
  // (1 / micro-batches of the global batch, so that each forward's loss counts once in their mean). Gradients accumulate
  // in the fp32 shards until zero_grad(). `last_micro_batch`: gradient-ready callbacks fire as
  // each layer's shard completes.
  MicroBatchResult forward_backward(const at::Tensor& tokens, const at::Tensor& labels, const at::Tensor& position_ids,
                                    double loss_scale, double aux_scale, bool last_micro_batch);
  // Loss without gradients (evaluation).
  MicroBatchResult forward_loss(const at::Tensor& tokens, const at::Tensor& labels, const at::Tensor& position_ids = {});
  // fp32 logits [batch, seq, vocab] without gradients (evaluation; the whole batch at once).
  // Not under sequence parallelism (refused).
  at::Tensor forward_logits(const at::Tensor& tokens, const at::Tensor& position_ids = {});

  // The part of rows [batch, seq] this rank computes: its shard under sequence parallelism,
  // else the rows (a step counts the tokens that carry loss with it).
  at::Tensor local_rows(const at::Tensor& rows) const {
    return options_.sequence_parallel ? options_.sequence_parallel->shard(rows) : rows;
  }
  // Data parallelism: the replicas that train different samples (world / sequence_parallel_size)
  // and this rank's replica.
  int data_parallel_size() const;
  int data_parallel_rank() const;

  void zero_grad();
  // sqrt of the sum of squares of every rank's gradient shards (one all-reduce, in fp64);
  // not finite when any gradient is not. `host_squares`, where given, returns this rank's sum
  // of squares of the host parts (the CPU share's gradients, which are the optimizer's buffers):
  // the optimizer sums them on its own threads, or has the sum already. By default they are
  // summed here, on LibTorch's OpenMP team of the calling thread, which is confined to that
  // thread's cores (on a 16-core GPU node: 1.0 s per step for 1.5 G host elements).
  double global_grad_norm(const std::function<double()>& host_squares = {});
  std::vector<PartitionedLayer>& layers() { return layers_; }
  const model::CausalLM& model() const { return *model_; }
  comm::Communicator& comm() { return comm_; }
  at::Device device() const { return options_.device; }
  const ParameterMemory& memory() const { return memory_; }
  const PhaseTimes& times() const { return times_; }
  // [model] activation_offload = "host": the host buffers and copies; null otherwise.
  const ActivationOffload* activation_offload() const { return offload_.get(); }
  void reset_times() { times_ = {}; }

  // Called with the layer index once that layer's gradient shard is complete for the step.
  using GradientReady = std::function<void(size_t layer)>;
  void on_gradient_ready(GradientReady callback) { gradient_ready_ = std::move(callback); }

  // Called as each layer's forward, and each layer's backward (its reduce-scatter started), is done,
  // on every micro-batch: progress for a watchdog (a long step is no stall), nothing else.
  using LayerDone = std::function<void(size_t layer, bool backward)>;
  void on_layer_done(LayerDone callback) { layer_done_ = std::move(callback); }

  // While set, forward_backward brackets every layer's phases for it ([profile] step); null: off.
  void set_profiler(LayerProfiler* profiler) { profiler_ = profiler; }

 private:
  void gather(size_t i);
  void prefetch(size_t i);
  void release(size_t i);
  void account();
  // Hands the layers whose reduced gradients are complete to the optimizer (last micro-batch).
  void deliver(const std::vector<size_t>& complete, bool last_micro_batch);
  // The context of whole rows `tokens` (their position_ids, document_ids from position_ids),
  // then, under sequence parallelism, position_ids narrowed to this rank's shard.
  model::BatchContext context_for(const at::Tensor& tokens, const at::Tensor& position_ids,
                                  std::vector<model::RouterStatistics>* routers) const;
  // HF's load-balancing loss over every MoE layer's statistics of one forward; under sequence
  // parallelism the statistics are first averaged over the group, which pools the row's tokens.
  model::LoadBalancing pooled_load_balancing(const std::vector<std::vector<model::RouterStatistics>>& layers) const;
  // Without gradients: the blocks' output (the head's input), the head left gathered.
  at::Tensor forward_blocks(const at::Tensor& tokens, const model::BatchContext& context);

  std::shared_ptr<model::CausalLM> model_;
  comm::Communicator& comm_;
  EngineOptions options_;
  BufferCache buffers_;  // before layers_: they hold a reference to it
  std::vector<PartitionedLayer> layers_;
  GradientReducer reducer_;
  ParameterMemory memory_;
  PhaseTimes times_;
  GradientReady gradient_ready_;
  LayerProfiler* profiler_ = nullptr;
  LayerDone layer_done_;
  std::unique_ptr<ActivationOffload> offload_;
};

}  // namespace superoffload::zero
