// PartitionedLayer.
#include "zero/partitioned_layer.hpp"

#include <torch/autograd.h>

#include "base/error.hpp"
#include "base/timer.hpp"

namespace superoffload::zero {

comm::DataType comm_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return comm::DataType::f32;
    case at::kBFloat16: return comm::DataType::bf16;
    case at::kHalf: return comm::DataType::f16;
    default: SO_FAIL("no collective data type for " << c10::toString(type));
  }
}

PartitionedLayer::PartitionedLayer(std::shared_ptr<model::Layer> layer, comm::Communicator& comm,
                                   BufferCache& buffers, at::ScalarType compute_dtype, at::Device device,
                                   bool persistent)
    : layer_(std::move(layer)), comm_(comm), buffers_(&buffers), persistent_(persistent),
      options_(at::TensorOptions().dtype(compute_dtype).device(device)) {
  std::vector<ParameterSlot> slots;
  for (auto& [name, tensor] : layer_->hf_parameters()) {
    // Norm scales and biases (1-D) take no weight decay.
    slots.push_back({name, tensor.sizes().vec(), tensor.numel(), 0, tensor.dim() >= 2});
    parameters_.push_back(tensor);
  }
  layout_ = FlatLayout(std::move(slots), comm_.size());
  torch::NoGradGuard no_grad;
  // One flat copy of the layer at a time (no concatenation temporary).
  auto flat = at::zeros({layout_.padded_numel()}, at::kFloat);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto& slot = layout_.parameters()[i];
    flat.narrow(0, slot.offset, slot.numel).copy_(parameters_[i].detach().reshape({-1}));
  }
  device_shard_ = flat.narrow(0, layout_.shard_begin(comm_.rank()), layout_.shard_numel()).to(options_).clone();
  grad_shard_ = at::zeros({layout_.shard_numel()}, options_.dtype(at::kFloat));
  unbind();
  if (persistent_) {
    gather_async();
    wait_gathered();
  }
}

void PartitionedLayer::bind_views() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto& slot = layout_.parameters()[i];
    parameters_[i].set_data(gathered_.narrow(0, slot.offset, slot.numel).view(slot.shape));
  }
}

void PartitionedLayer::unbind() {
  const auto empty = at::empty({0}, options_);
  for (auto& p : parameters_) p.set_data(empty);
}

void PartitionedLayer::gather_async() {
  if (live() || gathering()) return;
  if (gathers_in_place()) {  // one rank: the shard is the whole layer
    gathered_ = device_shard_;
    bind_views();
    return;
  }
  auto buffer = buffers_->take(layout_.padded_numel(), options_);
  pending_ = comm_.all_gather(device_shard_.data_ptr(), buffer.data_ptr(), static_cast<size_t>(layout_.shard_numel()),
                              comm_type(options_.dtype().toScalarType()));
  gathering_buffer_ = buffer;
}

void PartitionedLayer::wait_gathered() {
  if (live()) return;
  if (!gathering()) gather_async();
  if (live()) return;  // gathered in place
  pending_->wait();
  pending_.reset();
  gathered_ = std::move(gathering_buffer_);
  bind_views();
}

void PartitionedLayer::release() {
  if (persistent_ || !live()) return;
  unbind();
  drop_gathered();
}

void PartitionedLayer::drop_gathered() {
  if (!gathers_in_place()) buffers_->give(std::move(gathered_));
  gathered_ = at::Tensor();
}

void PartitionedLayer::set_shard(const at::Tensor& values) {
  torch::NoGradGuard no_grad;
  // An optimizer whose state is the shard itself has nothing to copy.
  if (values.data_ptr() != device_shard_.data_ptr() || values.scalar_type() != device_shard_.scalar_type()) {
    device_shard_.copy_(values);
  }
  shard_updated();
}

void PartitionedLayer::shard_updated() {
  if (!live() || gathers_in_place()) return;  // views of the shard see the new values already
  // Keep the gathered copy current: gather the new shards of every rank.
  unbind();
  drop_gathered();
  gather_async();
  wait_gathered();
}

double PartitionedLayer::reduce_gradients() {
  torch::NoGradGuard no_grad;
  const bool first = grad_stale_;  // the first micro-batch since zero_grad_shard() writes, later ones add
  grad_stale_ = false;
  if (comm_.size() == 1) {
    // One rank: the shard is the gradient. One pass per gradient, no collective.
    for (size_t i = 0; i < parameters_.size(); ++i) {
      const auto& slot = layout_.parameters()[i];
      auto target = grad_shard_.narrow(0, slot.offset, slot.numel);
      auto& grad = parameters_[i].mutable_grad();
      if (!grad.defined()) {  // e.g. an expert no token was routed to
        if (first) target.zero_();
        continue;
      }
      if (first) {
        target.copy_(grad.reshape({-1}));
      } else {
        target.add_(grad.reshape({-1}));
      }
      grad = at::Tensor();
    }
    return 0;
  }
  // Flatten into the collective's send buffer: every element is written once (gradients,
  // zeros where a parameter got none, padding).
  auto flat = buffers_->take(layout_.padded_numel(), options_.dtype(at::kFloat));
  int64_t written = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto& slot = layout_.parameters()[i];
    auto target = flat.narrow(0, slot.offset, slot.numel);
    if (slot.offset > written) flat.narrow(0, written, slot.offset - written).zero_();
    written = slot.offset + slot.numel;
    auto& grad = parameters_[i].mutable_grad();
    if (!grad.defined()) {
      target.zero_();
      continue;
    }
    target.copy_(grad.reshape({-1}));
    grad = at::Tensor();
  }
  if (layout_.padded_numel() > written) flat.narrow(0, written, layout_.padded_numel() - written).zero_();
  // Later micro-batches: add the accumulated shard into this rank's own part of the send
  // buffer, so that the collective writes the new sum straight into the shard.
  if (!first) flat.narrow(0, layout_.shard_begin(comm_.rank()), layout_.shard_numel()).add_(grad_shard_);
  auto work = comm_.reduce_scatter(flat.data_ptr(), grad_shard_.data_ptr(), static_cast<size_t>(layout_.shard_numel()),
                                   comm::DataType::f32, comm::ReduceOp::sum);
  const double wait_start = base::now_s();
  work->wait();
  const double waited = base::now_s() - wait_start;
  buffers_->give(std::move(flat));
  return waited;
}

at::Tensor& PartitionedLayer::grad_shard() {
  if (grad_stale_) {
    grad_shard_.zero_();
    grad_stale_ = false;
  }
  return grad_shard_;
}

int64_t PartitionedLayer::resident_numel() const {
  return layout_.shard_numel() + (live() && !gathers_in_place() ? layout_.padded_numel() : 0) +
         (gathering() ? layout_.padded_numel() : 0);
}

}  // namespace superoffload::zero
