// ZeroEngine.
#include "zero/engine.hpp"

#include <torch/autograd.h>

#include <cmath>

#include <tuple>

#include "base/error.hpp"
#include "base/timer.hpp"
#include "model/blocks/varlen_layout.hpp"
#include "zero/gradient_seed.hpp"
#include "zero/trace_scope.hpp"

namespace superoffload::zero {
using base::now_s;
using base::ScopedTime;

namespace {

// Sum of squares of fp32 tensors on a device, as a 0-dim fp64 tensor there, read by the caller
// once for all layers (reading each layer's would synchronise with the device once per layer).
// One multi-tensor norm over all of them (each norm accumulated in fp32 inside the kernel, its
// square summed in fp64): no copies. (A cast of each shard to fp64 and its square, in slices, was
// 6% of the kernel time of a 1.65B step with the optimizer on an H100: 244 casts and squares.)
// A shard whose norm passes fp32's range (1.8e19) reads as inf: the step is skipped as
// non-finite (and counted) where fp64 would have clipped it — a run long diverged by then.
at::Tensor device_squared_norm(const std::vector<at::Tensor>& tensors) {
  const auto norms = at::_foreach_norm(tensors, 2);
  return at::stack(norms).to(at::kDouble).square().sum();
}

// Sum of squares of an fp32 tensor, accumulated in fp64. On the CPU one pass over the data on
// LibTorch's threads (no fp64 copy), in eight independent sums per thread: one running sum is
// bound by the latency of its additions (0.45 G elements/s per thread measured on an EPYC; the
// CPU share of an 8B model is 6.8G elements every step). Not finite when an element is not.
double squared_norm(const at::Tensor& t) {
  SO_CHECK(t.device().is_cpu(), "squared_norm: a host tensor expected, not one on " << t.device());
  // One pass on the calling thread, on purpose: the order of the sum is part of a CPU run's
  // reproducibility across thread counts (the CPU optimizer's share has its own, pooled norm).
  const float* data = t.const_data_ptr<float>();
  const int64_t end = t.numel();
  constexpr int kLanes = 8;
  double lanes[kLanes] = {}, sum = 0.0;
  int64_t i = 0;
  for (; i + kLanes <= end; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lanes[k] += static_cast<double>(data[i + k]) * static_cast<double>(data[i + k]);
  }
  for (; i < end; ++i) sum += static_cast<double>(data[i]) * static_cast<double>(data[i]);
  for (double lane : lanes) sum += lane;
  return sum;
}


// The loss sum and its token count into `result` with one device-to-host read: the host waits
// once, after all of the micro-batch is queued.
void read_loss(const model::LossSum& loss, MicroBatchResult& result) {
  const auto read = at::stack({loss.sum.to(at::kDouble), loss.tokens.to(at::kDouble)}).cpu();
  result.loss_sum = read[0].item<double>();
  result.tokens = static_cast<int64_t>(read[1].item<double>());
}

}  // namespace

ZeroEngine::ZeroEngine(std::shared_ptr<model::CausalLM> model, comm::Communicator& comm, EngineOptions options,
                       const std::function<void(size_t)>& materialize, const LayerShardFiller& fill_shard)
    : model_(std::move(model)),
      comm_(comm),
      options_(options),
      // Two gathered layers (the current one and a prefetch) and the reducer's buffers in flight,
      // with room for the embedding and the head, whose sizes differ from the blocks'.
      buffers_(options.device.is_cpu(), 6),
      reducer_(comm, buffers_, options.device, options.reduce_bucket_size) {
  const auto& layers = model_->layers();
  SO_CHECK(layers.size() >= 2, "a model needs at least an embedding and a head layer");
  SO_CHECK(dynamic_cast<model::HeadLayer*>(layers.back().get()), "the last layer of a model must be a HeadLayer");
  // A tied weight lives in the embedding and is used by the head: keep the embedding gathered
  // so the head always finds it, and reduce its gradient only after the embedding's own
  // backward (the last one), when both contributions have accumulated.
  const bool tied = !model_->tied_parameters().empty();
  if (options_.activation_offload) {
    SO_CHECK(options_.activation_checkpointing,
             "activation offload keeps the checkpointed layer inputs in host memory: it needs activation checkpointing");
    offload_ = std::make_unique<ActivationOffload>(options_.device, options_.pin_activations,
                                                   options_.activation_copy_delay);
  }
  layers_.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    int64_t numel = 0;
    for (const auto& [name, t] : layers[i]->hf_parameters()) numel += t.numel();
    const bool persistent = numel < options_.persistence_threshold || (tied && i == 0);
    if (materialize) materialize(i);
    PartitionedLayer::ShardFiller filler;
    if (fill_shard) {
      filler = [&fill_shard, i](const std::vector<ShardPiece>& pieces, at::Tensor& shard) { fill_shard(i, pieces, shard); };
    }
    if (const auto* ep = options_.expert_parallel; ep != nullptr && layers[i]->expert_count() > 0) {
      const int64_t experts = layers[i]->expert_count();
      if (experts % ep->size() != 0) {
        throw Error(layers[i]->hf_prefix() + " has " + std::to_string(experts) + " experts, which do not divide among " +
                        std::to_string(ep->size()) + " expert-parallel ranks ([moe] expert_parallel_size = " +
                        std::to_string(ep->size()) + ")",
                    "set [moe] expert_parallel_size to a divisor of " + std::to_string(experts) +
                        " that divides the world size",
                    Error::UserInput{});
      }
    }
    layers_.emplace_back(layers[i], comm_, buffers_, options_.compute_dtype, options_.device, persistent,
                         [this](const std::string& name) { return model_->decays(name); }, filler,
                         options_.expert_parallel, options_.shards_filled_later);
  }
  account();
}

void ZeroEngine::account() {
  memory_.shard_numel = 0;
  memory_.live_numel = 0;
  for (const auto& l : layers_) {
    memory_.shard_numel += l.shard_numel();
    // A layer gathered in place (one rank) occupies no memory besides its shard.
    if ((l.live() && !l.gathers_in_place()) || l.gathering()) memory_.live_numel += l.gathered_numel();
  }
  memory_.peak_live_numel = std::max(memory_.peak_live_numel, memory_.live_numel);
  memory_.peak_resident_numel = std::max(memory_.peak_resident_numel, memory_.shard_numel + memory_.live_numel);
}

void ZeroEngine::deliver(const std::vector<size_t>& complete, bool last_micro_batch) {
  if (!last_micro_batch || !gradient_ready_) return;
  const TraceScope traced("superoffload/gradients to optimizer");
  for (size_t layer : complete) gradient_ready_(layer);
}

void ZeroEngine::gather(size_t i) {
  ScopedTime timed(times_.gather_wait_s);
  layers_[i].wait_gathered();
  account();
}

void ZeroEngine::prefetch(size_t i) {
  auto& next = layers_[i];
  if (next.live() || next.gathering()) return;
  const int64_t size = next.gathered_numel();
  if (size > options_.prefetch_bucket_size) return;
  if (memory_.live_numel + size > options_.max_live_parameters) return;
  next.gather_async();
  account();
}

void ZeroEngine::release(size_t i) {
  layers_[i].release();
  account();
}

model::BatchContext ZeroEngine::context_for(const at::Tensor& tokens, const at::Tensor& position_ids,
                                            std::vector<model::RouterStatistics>* routers) const {
  model::BatchContext context;
  const int64_t batch = tokens.size(0), seq = tokens.size(1);
  if (position_ids.defined()) {
    // Packed documents: each starts at position 0 (HF's padding-free convention), and attention
    // stays within it.
    context.position_ids = position_ids;
    context.document_ids = position_ids.eq(0).cumsum(1);
  } else {
    context.position_ids = at::arange(seq, tokens.options().dtype(at::kLong)).unsqueeze(0).expand({batch, seq});
  }
  // Sequence parallelism: positions (hence rotary angles, learned position embeddings) are the
  // shard's, at their places in the row; document_ids stay whole for attention.
  if (const auto* sp = options_.sequence_parallel) {
    context.position_ids = sp->shard(context.position_ids);
    context.sequence_parallel = sp;
  }
  context.expert_parallel = options_.expert_parallel;
  context.router_statistics = routers;
  context.tile_tokens = options_.tile_tokens;
  return context;
}

int ZeroEngine::data_parallel_size() const {
  return comm_.size() / (options_.sequence_parallel ? options_.sequence_parallel->size() : 1);
}

int ZeroEngine::data_parallel_rank() const {
  return comm_.rank() / (options_.sequence_parallel ? options_.sequence_parallel->size() : 1);
}

model::LoadBalancing ZeroEngine::pooled_load_balancing(
    const std::vector<std::vector<model::RouterStatistics>>& layers) const {
  std::vector<model::RouterStatistics> all;
  for (const auto& layer : layers) all.insert(all.end(), layer.begin(), layer.end());
  const auto* sp = options_.sequence_parallel;
  if (sp != nullptr && sp->size() > 1 && !all.empty()) {
    // Each rank's statistics are means over its shard's tokens; shards are equal, so the
    // group's mean is the mean over the row, as HF pools it. One exchange for every layer.
    // The gradient that backward hands each rank's router is then the pooled one: the
    // group's P ranks each add 1/P of it through their own shard's mean (the 1/P is in the
    // step's aux_scale, which counts ranks, not replicas).
    std::vector<at::Tensor> parts;
    for (const auto& r : all) {
      parts.push_back(r.routed.detach().to(at::kFloat));
      parts.push_back(r.probability.detach().to(at::kFloat));
    }
    auto pooled = at::stack(parts).contiguous();
    sp->average(pooled);
    for (size_t i = 0; i < all.size(); ++i) {
      all[i].routed = pooled[static_cast<int64_t>(2 * i)];
      all[i].probability = pooled[static_cast<int64_t>(2 * i + 1)];
    }
  }
  return model::load_balancing(all);
}

void ZeroEngine::zero_grad() {
  for (auto& l : layers_) l.zero_grad_shard();
}

double ZeroEngine::global_grad_norm(const std::function<double()>& host_squares) {
  const TraceScope traced("superoffload/gradient norm");
  double squares = host_squares ? host_squares() : 0.0;
  std::vector<at::Tensor> on_device;  // the device shards, summed at once and read once
  auto add = [&](const at::Tensor& t) {
    if (t.device().is_cpu()) {
      squares += squared_norm(t);
    } else if (t.numel() > 0) {
      on_device.push_back(t.reshape({-1}));
    }
  };
  for (auto& layer : layers_) {
    add(layer.grad_shard());
    if (!host_squares) add(layer.host_grad());
  }
  if (!on_device.empty()) squares += device_squared_norm(on_device).item<double>();
  comm_.all_reduce_host(&squares, 1, comm::ReduceOp::sum);
  return std::sqrt(squares);
}

MicroBatchResult ZeroEngine::forward_backward(const at::Tensor& tokens, const at::Tensor& labels,
                                              const at::Tensor& position_ids, double loss_scale,
                                              double aux_scale, bool last_micro_batch) {
  const size_t n = layers_.size();
  const size_t head = n - 1;
  MicroBatchResult result;
  // Packed documents' varlen layout: read from the device once for this micro-batch, not per
  // layer and pass (model/blocks/varlen_layout.hpp).
  const model::VarlenLayoutCache varlen_layouts;
  auto context = context_for(tokens, position_ids, nullptr);
  const auto labels_here = local_rows(labels);

  // ---- Forward: keep each layer's input (checkpointing) or its whole graph.
  std::vector<at::Tensor> inputs(n), outputs(n);
  // MoE routers' statistics per layer (with their graphs unless checkpointing recomputes them).
  std::vector<std::vector<model::RouterStatistics>> routers(n);
  at::Tensor x = local_rows(tokens);
  using P = ProfilePhase;
  auto profile = [this](size_t layer, ProfilePhase phase) { return ProfileScope(profiler_, layer, phase); };
  {
    const auto profiled = profile(0, P::gather);
    gather(0);
  }
  memory_.activation_bytes = 0;
  for (size_t i = 0; i < head; ++i) {
    {
      const auto profiled = profile(i, P::gather);
      gather(i);
    }
    prefetch(i + 1);
    inputs[i] = i == 0 ? x : x.detach();
    context.router_statistics = &routers[i];
    ScopedTime timed(times_.forward_s);
    const auto profiled = profile(i, P::forward);
    if (options_.activation_checkpointing) {
      torch::NoGradGuard no_grad;
      x = layers_[i].layer().forward(inputs[i], context);
      release(i);
      // The embedding's input is the token ids: kept. Every later input goes to host memory
      // while the next layers run.
      if (offload_ && i > 0) {
        offload_->store(i, inputs[i]);
        inputs[i] = at::Tensor();
      }
    } else {
      if (i > 0) inputs[i].requires_grad_(true);
      outputs[i] = layers_[i].layer().forward(inputs[i], context);
      x = outputs[i];
    }
    if (i > 0 && inputs[i].defined()) {
      memory_.activation_bytes += static_cast<int64_t>(inputs[i].numel() * inputs[i].element_size());
    }
    if (layer_done_) layer_done_(i, /*backward=*/false);
  }
  context.router_statistics = nullptr;
  // HF's load-balancing loss pools every MoE layer of the pass: its value and each layer's
  // gradient are known only now, and backward hands each layer its share.
  const model::LoadBalancing balancing = pooled_load_balancing(routers);
  result.aux_loss = balancing.loss;
  if (options_.activation_checkpointing) {
    for (auto& r : routers) r.clear();  // computed without graph; recomputed in backward
  }

  // The last block's input comes back while the head runs.
  if (offload_ && head >= 2) offload_->prefetch(head - 1);

  // ---- Head: loss and its backward, chunk by chunk.
  {
    const auto profiled = profile(head, P::gather);
    gather(head);
  }
  if (head >= 1) prefetch(head - 1);
  auto* head_layer = dynamic_cast<model::HeadLayer*>(&layers_[head].layer());
  model::LossSum loss;
  at::Tensor grad;
  {
    ScopedTime timed(times_.forward_s);  // the head's forward and backward, fused chunk by chunk
    const auto profiled = profile(head, P::forward);
    std::tie(loss, grad) = head_layer->loss_and_backward(x.detach(), labels_here, options_.loss_chunk_tokens, loss_scale, context);
  }
  // The loss is read at the end: reading it here would make the host wait for the forward
  // before it queues the first backward kernel (a bubble on a GPU).
  {
    ScopedTime timed(times_.reduce_s);
    const auto profiled = profile(head, P::reduce);
    reducer_.reduce(head, layers_[head]);
  }
  if (layer_done_) layer_done_(head, /*backward=*/true);
  deliver(reducer_.poll(), last_micro_batch);
  release(head);

  // ---- Backward through the blocks and the embedding, in reverse.
  for (size_t i = head; i-- > 0;) {
    {
      const auto profiled = profile(i, P::gather);
      gather(i);
    }
    if (i >= 1) prefetch(i - 1);
    const double backward_start = now_s();
    at::Tensor out;
    if (options_.activation_checkpointing) {
      const auto profiled = profile(i, P::recompute);
      if (offload_ && i > 0) {
        inputs[i] = offload_->take(i);
        if (i >= 2) offload_->prefetch(i - 1);  // one layer ahead of its recompute
      }
      if (i > 0) inputs[i] = inputs[i].detach().requires_grad_(true);
      context.router_statistics = &routers[i];
      out = layers_[i].layer().forward(inputs[i], context);
      context.router_statistics = nullptr;
    } else {
      out = outputs[i];
    }
    // The output and the gradient coming into it are let go of before backward, which frees
    // each once its nodes are done with it (gradient_seed.hpp).
    const auto seed = gradient_seed(std::move(out), std::move(grad));
    std::vector<at::Tensor> roots{seed}, grads{at::ones({}, seed.options())};
    for (const auto& r : routers[i]) {
      if (!r.probability.requires_grad()) continue;
      roots.push_back(r.probability);
      grads.push_back((balancing.gradient * aux_scale).to(r.probability.options()));
    }
    routers[i].clear();
    {
      const auto profiled = profile(i, P::backward);
      torch::autograd::backward(roots, grads);
    }
    if (i > 0) grad = inputs[i].grad();
    // The input (recomputed, or fetched back from host memory) and, through it, its gradient
    // are done with: kept until the end of the micro-batch they were two hidden states per
    // layer (42 GiB of an 8B at 90k tokens on an H200; tests/zero/activation_memory.cpp).
    inputs[i] = at::Tensor();
    outputs[i] = at::Tensor();
    times_.backward_s += now_s() - backward_start;
    {
      ScopedTime timed(times_.reduce_s);
      const auto profiled = profile(i, P::reduce);
      reducer_.reduce(i, layers_[i]);
    }
    if (layer_done_) layer_done_(i, /*backward=*/true);
    deliver(reducer_.poll(), last_micro_batch);
    release(i);
  }
  {
    ScopedTime timed(times_.reduce_s);
    const TraceScope traced("superoffload/reduce finish");
    deliver(reducer_.finish(), last_micro_batch);
  }
  times_.reduce_wait_s += reducer_.take_wait_seconds();
  {
    ScopedTime timed(times_.backward_s);  // on a GPU: the host waits for the last backward kernels
    const TraceScope traced("superoffload/loss read");
    read_loss(loss, result);
  }
  return result;
}

at::Tensor ZeroEngine::forward_blocks(const at::Tensor& tokens, const model::BatchContext& context) {
  const size_t head = layers_.size() - 1;
  at::Tensor x = tokens;
  for (size_t i = 0; i < head; ++i) {
    gather(i);
    prefetch(i + 1);
    x = layers_[i].layer().forward(x, context);
    release(i);
  }
  gather(head);
  return x;
}

at::Tensor ZeroEngine::forward_logits(const at::Tensor& tokens, const at::Tensor& position_ids) {
  torch::NoGradGuard no_grad;
  SO_CHECK(!options_.sequence_parallel || options_.sequence_parallel->size() == 1,
           "whole-batch logits are not computed under sequence parallelism" << hint("evaluate without [parallel] "
                                                                                "sequence_parallel_size"));
  const auto context = context_for(tokens, position_ids, nullptr);
  const auto hidden = forward_blocks(tokens, context);
  const size_t head = layers_.size() - 1;
  auto logits = layers_[head].layer().forward(hidden, context).to(at::kFloat);
  release(head);
  return logits;
}

MicroBatchResult ZeroEngine::forward_loss(const at::Tensor& tokens, const at::Tensor& labels,
                                          const at::Tensor& position_ids) {
  torch::NoGradGuard no_grad;
  const size_t head = layers_.size() - 1;
  std::vector<model::RouterStatistics> routers;
  const model::VarlenLayoutCache varlen_layouts;
  const auto context = context_for(tokens, position_ids, &routers);
  const auto x = forward_blocks(local_rows(tokens), context);
  auto* head_layer = dynamic_cast<model::HeadLayer*>(&layers_[head].layer());
  const auto loss = head_layer->loss(x, local_rows(labels), options_.loss_chunk_tokens, context);
  release(head);
  MicroBatchResult result;
  read_loss(loss, result);
  result.aux_loss = pooled_load_balancing({routers}).loss;
  return result;
}

}  // namespace superoffload::zero
