// PartitionedLayer.
#include "zero/partitioned_layer.hpp"

#include <torch/autograd.h>

#include "base/error.hpp"

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
                                   at::ScalarType compute_dtype, at::Device device, bool persistent)
    : layer_(std::move(layer)), comm_(comm), persistent_(persistent),
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
  auto buffer = at::empty({layout_.padded_numel()}, options_);
  pending_ = comm_.all_gather(device_shard_.data_ptr(), buffer.data_ptr(), static_cast<size_t>(layout_.shard_numel()),
                              comm_type(options_.dtype().toScalarType()));
  gathering_buffer_ = buffer;
}

void PartitionedLayer::wait_gathered() {
  if (live()) return;
  if (!gathering()) gather_async();
  pending_->wait();
  pending_.reset();
  gathered_ = std::move(gathering_buffer_);
  bind_views();
}

void PartitionedLayer::release() {
  if (persistent_ || !live()) return;
  unbind();
  gathered_ = at::Tensor();
}

void PartitionedLayer::set_shard(const at::Tensor& values) {
  torch::NoGradGuard no_grad;
  device_shard_.copy_(values);
  if (live()) {
    // Keep the gathered copy current: gather the new shards of every rank.
    gathered_ = at::Tensor();
    gather_async();
    wait_gathered();
  }
}

void PartitionedLayer::reduce_gradients() {
  torch::NoGradGuard no_grad;
  auto flat = at::zeros({layout_.padded_numel()}, options_.dtype(at::kFloat));
  for (size_t i = 0; i < parameters_.size(); ++i) {
    auto& grad = parameters_[i].mutable_grad();
    if (!grad.defined()) continue;  // e.g. an expert no token was routed to
    const auto& slot = layout_.parameters()[i];
    flat.narrow(0, slot.offset, slot.numel).copy_(grad.reshape({-1}));
    grad = at::Tensor();
  }
  auto mine = at::empty({layout_.shard_numel()}, flat.options());
  comm_.reduce_scatter(flat.data_ptr(), mine.data_ptr(), static_cast<size_t>(layout_.shard_numel()),
                       comm::DataType::f32, comm::ReduceOp::sum)
      ->wait();
  grad_shard_.add_(mine);
}

int64_t PartitionedLayer::resident_numel() const {
  return layout_.shard_numel() + (live() ? layout_.padded_numel() : 0) +
         (gathering() ? layout_.padded_numel() : 0);
}

}  // namespace superoffload::zero
