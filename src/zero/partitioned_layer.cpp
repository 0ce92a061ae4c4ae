// PartitionedLayer.
#include "zero/partitioned_layer.hpp"

#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>

#include "base/error.hpp"
#include "base/fresh_memory.hpp"
#include "base/timer.hpp"
#include "zero/expert_parallel.hpp"

namespace superoffload::zero {

comm::DataType comm_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return comm::DataType::f32;
    case at::kBFloat16: return comm::DataType::bf16;
    case at::kHalf: return comm::DataType::f16;
    case at::kLong: return comm::DataType::i64;  // expert parallelism's per-expert counts
    case at::kInt: return comm::DataType::i32;
    default: SO_FAIL("no collective data type for " << c10::toString(type));
  }
}

namespace {

// The regions of a layer: one over `world`, or under expert parallelism the shared parameters
// over `world` and this rank's experts over their replicas. Slots keep the layer's order.
std::vector<LayerRegion> make_regions(const model::Layer& layer, const FlatLayout& full, comm::Communicator& world,
                                      const ExpertParallel* expert_parallel) {
  const int64_t experts = layer.expert_count();
  const bool split = expert_parallel != nullptr && expert_parallel->size() > 1 && experts > 0;
  std::vector<LayerRegion> regions(split ? 2 : 1);
  std::vector<std::vector<ParameterSlot>> slots(regions.size());
  const auto local = split ? expert_parallel->local(experts) : model::ExpertRange{0, experts};
  for (size_t i = 0; i < full.parameters().size(); ++i) {
    const auto& p = full.parameters()[i];
    const int64_t expert = split ? layer.expert_of(p.name) : model::Layer::kSharedParameter;
    size_t region = 0;
    int64_t first = 0;
    auto slot = p;
    if (expert == model::Layer::kStackedExperts) {
      SO_CHECK(!p.shape.empty() && p.shape[0] == experts,
               p.name << " is declared a stacked expert tensor, but its first dimension is not the " << experts
                      << " experts");
      const int64_t row = p.numel / experts;
      slot.shape[0] = local.count;
      slot.numel = local.count * row;
      first = local.first * row;
      region = 1;
    } else if (expert >= 0) {
      SO_CHECK(expert < experts, p.name << " is declared a parameter of expert " << expert << " of " << experts);
      if (!local.contains(expert)) continue;  // another rank's expert: never held here
      region = 1;
    } else {
      SO_CHECK(expert == model::Layer::kSharedParameter, p.name << ": expert_of returned " << expert);
    }
    regions[region].parameter.push_back(i);
    regions[region].first_element.push_back(first);
    slots[region].push_back(std::move(slot));
  }
  int64_t shard_offset = 0, gathered_offset = 0;
  for (size_t r = 0; r < regions.size(); ++r) {
    auto& region = regions[r];
    region.comm = r == 0 ? &world : &expert_parallel->replicas();
    region.layout = FlatLayout(std::move(slots[r]), region.comm->size());
    region.shard_offset = shard_offset;
    region.gathered_offset = gathered_offset;
    shard_offset += region.layout.shard_numel();
    if (!region.in_place()) gathered_offset += region.layout.padded_numel();
  }
  return regions;
}

}  // namespace

PartitionedLayer::PartitionedLayer(std::shared_ptr<model::Layer> layer, comm::Communicator& comm,
                                   BufferCache& buffers, at::ScalarType compute_dtype, at::Device device,
                                   bool persistent, const std::function<bool(const std::string&)>& decays,
                                   const ShardFiller& fill_shard, const ExpertParallel* expert_parallel,
                                   bool filled_later)
    : layer_(std::move(layer)), comm_(comm), buffers_(&buffers), persistent_(persistent),
      options_(at::TensorOptions().dtype(compute_dtype).device(device)) {
  std::vector<ParameterSlot> slots;
  for (auto& [name, tensor] : layer_->hf_parameters()) {
    slots.push_back({name, tensor.sizes().vec(), tensor.numel(), 0, decays(name)});
    parameters_.push_back(tensor);
  }
  layout_ = FlatLayout(std::move(slots), comm_.size());
  regions_ = make_regions(*layer_, layout_, comm_, expert_parallel);
  for (const auto& region : regions_) {
    for (const auto& piece : region.layout.pieces(region.comm->rank())) {
      const size_t slot = piece.parameter;
      pieces_.push_back({region.parameter[slot], region.first_element[slot] + piece.parameter_offset,
                         region.shard_offset + piece.shard_offset, piece.length});
    }
    shard_numel_ += region.layout.shard_numel();
    if (!region.in_place()) gathered_numel_ += region.layout.padded_numel();
  }
  torch::NoGradGuard no_grad;
  if (filled_later) {
    // Copying the unfilled parameters in had cost a read fault per page of them and a write
    // fault per page of the shard, for values the checkpoint overwrites (0.55B at 1 rank,
    // 0.7-3.3 s of a resume's partitioning on this project's 2-core VM); a GPU run also made and
    // sent a host fp32 copy of every shard.
    device_shard_ = at::empty({shard_numel_}, options_);
    if (device_shard_.is_cpu()) {
      base::for_each_page_chunk(device_shard_.data_ptr(), device_shard_.nbytes(), at::get_num_threads(),
                                [](char* chunk, size_t bytes) { base::populate_for_write(chunk, bytes); });
    }
  } else {
    fill_shard_from(fill_shard);
  }
  // The gradient is allocated at its first use (grad_shard()): an optimizer moves most of it to
  // host memory before then (place_gradient), and eval never uses it. Allocated here, a full
  // fp32 copy of every shard existed at once during set-up: 4 bytes per parameter over the plan.
  grad_split_ = shard_numel_;
  host_grad_ = at::empty({0}, at::kFloat);
  unbind();
  if (persistent_) {
    gather_async();
    wait_gathered();
  }
}

void PartitionedLayer::fill_shard_from(const ShardFiller& fill_shard) {
  // Only this rank's pieces, each element written once: the pieces by the filler (weights read
  // by shard), else from the layer's own parameters (random initialisation, full layers read);
  // the rest (the padding after the last parameter) zeroed here, not the whole buffer first. A
  // shard already in the compute dtype on the host (fp32 CPU runs) is the buffer itself.
  // (Copying the whole layer into a zeroed flat buffer and cloning this rank's part took three
  // passes over the layer and two full-size allocations: 0.36B at 1 rank, 1.5 s of
  // partitioning on this project's 2-core VM.) Pieces come in shard order.
  auto shard = at::empty({shard_numel_}, at::kFloat);
  int64_t covered = 0;
  for (const auto& piece : pieces_) {
    if (piece.shard_offset > covered) shard.narrow(0, covered, piece.shard_offset - covered).zero_();
    covered = std::max(covered, piece.shard_offset + piece.length);
  }
  if (covered < shard.numel()) shard.narrow(0, covered, shard.numel() - covered).zero_();
  if (fill_shard) {
    fill_shard(pieces_, shard);
  } else {
    for (const auto& piece : pieces_) {
      shard.narrow(0, piece.shard_offset, piece.length)
          .copy_(parameters_[piece.parameter].detach().reshape({-1}).narrow(0, piece.parameter_offset, piece.length));
    }
  }
  device_shard_ = options_.dtype() == at::kFloat && options_.device().is_cpu() ? shard : shard.to(options_);
}

void PartitionedLayer::bind_views() {
  for (const auto& region : regions_) {
    const auto base = region.in_place() ? device_shard_.narrow(0, region.shard_offset, region.layout.shard_numel())
                                        : gathered_.narrow(0, region.gathered_offset, region.layout.padded_numel());
    for (size_t s = 0; s < region.parameter.size(); ++s) {
      const auto& slot = region.layout.parameters()[s];
      parameters_[region.parameter[s]].set_data(base.narrow(0, slot.offset, slot.numel).view(slot.shape));
    }
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
  auto buffer = buffers_->take(gathered_numel_, options_);
  const auto type = comm_type(options_.dtype().toScalarType());
  const auto element = static_cast<int64_t>(device_shard_.element_size());
  for (const auto& region : regions_) {
    if (region.in_place()) continue;
    auto* send = static_cast<char*>(device_shard_.data_ptr()) + region.shard_offset * element;
    auto* recv = static_cast<char*>(buffer.data_ptr()) + region.gathered_offset * element;
    pending_.push_back(region.comm->all_gather(send, recv, static_cast<size_t>(region.layout.shard_numel()), type));
  }
  gathering_buffer_ = buffer;
}

void PartitionedLayer::wait_gathered() {
  if (live()) return;
  if (!gathering()) gather_async();
  if (live()) return;  // gathered in place
  for (auto& work : pending_) work->wait();
  pending_.clear();
  gathered_ = std::move(gathering_buffer_);
  gathering_buffer_ = at::Tensor();
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
  SO_CHECK(split >= 0 && split <= shard_numel_, "gradient split " << split << " outside the shard of " << shard_numel_);
  const int64_t host_numel = shard_numel_ - split;
  SO_CHECK(host_numel == 0 || (host.defined() && host.numel() == host_numel && host.scalar_type() == at::kFloat &&
                               host.device().is_cpu() && host.is_contiguous()),
           "the host gradient of a layer must be a contiguous fp32 host tensor of " << host_numel << " elements");
  grad_split_ = split;
  grad_shard_ = at::Tensor();  // allocated at its first use
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
  if (!grad_shard_.defined()) {
    grad_shard_ = at::zeros({grad_split_}, options_.dtype(at::kFloat));
  } else if (grad_stale_) {
    grad_shard_.zero_();
  }
  if (grad_stale_) {
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
  return shard_numel_ + (live() && !gathers_in_place() ? gathered_numel_ : 0) + (gathering() ? gathered_numel_ : 0);
}

}  // namespace superoffload::zero
