// PartitionedLayer.
#include "zero/partitioned_layer.hpp"

#include <torch/autograd.h>

#include <algorithm>

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
                                   bool persistent, const std::function<bool(const std::string&)>& decays,
                                   const ShardFiller& fill_shard)
    : layer_(std::move(layer)), comm_(comm), buffers_(&buffers), persistent_(persistent),
      options_(at::TensorOptions().dtype(compute_dtype).device(device)) {
  std::vector<ParameterSlot> slots;
  for (auto& [name, tensor] : layer_->hf_parameters()) {
    slots.push_back({name, tensor.sizes().vec(), tensor.numel(), 0, decays(name)});
    parameters_.push_back(tensor);
  }
  layout_ = FlatLayout(std::move(slots), comm_.size());
  torch::NoGradGuard no_grad;
  // Only this rank's pieces, each element written once: the pieces by the filler (weights read
  // by shard), else from the layer's own parameters (random initialisation, full layers read;
  // on a resume they are uninitialised and the checkpoint overwrites the shard later); the rest (the padding after the last parameter) zeroed here, not the whole
  // buffer first. A shard already in the compute dtype on the host (fp32 CPU runs) is the
  // buffer itself. (Copying the whole layer into a zeroed flat buffer and cloning this rank's
  // part took three passes over the layer and two full-size allocations: 0.36B at 1 rank,
  // 1.5 s of partitioning on this project's 2-core VM.) Pieces come in flat order
  // (FlatLayout::pieces).
  auto shard = at::empty({layout_.shard_numel()}, at::kFloat);
  const auto pieces = layout_.pieces(comm_.rank());
  int64_t covered = 0;
  for (const auto& piece : pieces) {
    if (piece.shard_offset > covered) shard.narrow(0, covered, piece.shard_offset - covered).zero_();
    covered = std::max(covered, piece.shard_offset + piece.length);
  }
  if (covered < shard.numel()) shard.narrow(0, covered, shard.numel() - covered).zero_();
  if (fill_shard) {
    fill_shard(pieces, shard);
  } else {
    for (const auto& piece : pieces) {
      shard.narrow(0, piece.shard_offset, piece.length)
          .copy_(parameters_[piece.parameter].detach().reshape({-1}).narrow(0, piece.parameter_offset, piece.length));
    }
  }
  device_shard_ = options_.dtype() == at::kFloat && options_.device().is_cpu() ? shard : shard.to(options_);
  grad_split_ = layout_.shard_numel();
  grad_shard_ = at::zeros({grad_split_}, options_.dtype(at::kFloat));
  host_grad_ = at::empty({0}, at::kFloat);
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

void PartitionedLayer::place_gradient(int64_t split, at::Tensor host) {
  SO_CHECK(split >= 0 && split <= layout_.shard_numel(), "gradient split " << split << " outside the shard of "
                                                                          << layout_.shard_numel());
  const int64_t host_numel = layout_.shard_numel() - split;
  SO_CHECK(host_numel == 0 || (host.defined() && host.numel() == host_numel && host.scalar_type() == at::kFloat &&
                               host.device().is_cpu() && host.is_contiguous()),
           "the host gradient of a layer must be a contiguous fp32 host tensor of " << host_numel << " elements");
  grad_split_ = split;
  grad_shard_ = at::zeros({split}, options_.dtype(at::kFloat));
  host_grad_ = host_numel > 0 ? std::move(host) : at::empty({0}, at::kFloat);
  grad_stale_ = true;
}

bool PartitionedLayer::begin_reduction() {
  const bool first = grad_stale_;
  grad_stale_ = false;
  return first;
}

std::vector<at::Tensor> PartitionedLayer::gradients() const {
  std::vector<at::Tensor> out;
  out.reserve(parameters_.size());
  for (const auto& p : parameters_) out.push_back(p.grad());
  return out;
}

void PartitionedLayer::clear_gradients() {
  for (auto& p : parameters_) p.mutable_grad() = at::Tensor();
}

at::Tensor& PartitionedLayer::grad_shard() {
  if (grad_stale_) {
    grad_shard_.zero_();
    host_grad_.zero_();
    grad_stale_ = false;
  }
  return grad_shard_;
}

at::Tensor& PartitionedLayer::host_grad() {
  grad_shard();  // zeroes both parts when stale
  return host_grad_;
}

int64_t PartitionedLayer::resident_numel() const {
  return layout_.shard_numel() + (live() && !gathers_in_place() ? layout_.padded_numel() : 0) +
         (gathering() ? layout_.padded_numel() : 0);
}

}  // namespace superoffload::zero
