// GradientReducer.
#include "zero/gradient_reducer.hpp"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/autograd.h>

#include <algorithm>
#include <utility>

#include "base/error.hpp"
#include "base/timer.hpp"

namespace superoffload::zero {

GradientReducer::GradientReducer(comm::Communicator& comm, BufferCache& buffers, at::Device device,
                                 int64_t bucket_elements)
    : comm_(comm),
      buffers_(buffers),
      device_(device),
      bucket_elements_(bucket_elements),
      // Two chunks, one being filled while the one before is reduced, each with its send buffer
      // and (for the host part) its staging buffer.
      limit_(2 * chunk_per_rank(comm) * (comm.size() > 1 ? comm.size() + 1 : 1)) {
  if (!device_.is_cpu()) {
    const c10::impl::VirtualGuardImpl guard(device_.type());
    copy_stream_ = guard.getStreamFromGlobalPool(device_);
  }
}

int64_t GradientReducer::chunk_per_rank(const comm::Communicator& comm) const {
  // One rank reduces nothing: its chunks only stage the CPU share's gradient for the copy to
  // host memory, which needs no large buffer.
  return std::max<int64_t>(1, comm.size() == 1 ? std::min<int64_t>(bucket_elements_, kOneRankChunk)
                                               : bucket_elements_ / comm.size());
}

void GradientReducer::flatten(const LayerRegion& region, const std::vector<at::Tensor>& grads, int64_t begin,
                              at::Tensor dest, bool accumulate) const {
  const int64_t length = dest.numel();
  int64_t written = 0;
  auto zero_until = [&](int64_t offset) {
    if (!accumulate && offset > written) dest.narrow(0, written, offset - written).zero_();
  };
  for (const auto& piece : region.layout.pieces_in(begin, begin + length)) {
    const auto& grad = grads[region.parameter[piece.parameter]];
    zero_until(piece.shard_offset);
    written = piece.shard_offset + piece.length;
    if (!grad.defined()) {  // e.g. an expert no token was routed to
      if (!accumulate) dest.narrow(0, piece.shard_offset, piece.length).zero_();
      continue;
    }
    auto target = dest.narrow(0, piece.shard_offset, piece.length);
    const auto source = grad.reshape({-1}).narrow(0, piece.parameter_offset, piece.length);
    if (accumulate) {
      target.add_(source);
    } else {
      target.copy_(source);
    }
  }
  zero_until(length);
}

std::unique_ptr<c10::Event> GradientReducer::copy_to_host(comm::Work* work, const at::Tensor& staging,
                                                          at::Tensor target) {
  // On the copy stream: it waits for the collective (NcclWork::wait orders the current
  // stream), or for the compute stream that wrote the staging buffer; the compute stream
  // goes on with backward.
  const c10::impl::VirtualGuardImpl guard(device_.type());
  auto event = std::make_unique<c10::Event>(device_.type());
  if (work) {
    const c10::StreamGuard on_copy(*copy_stream_);
    work->wait();
  } else {
    c10::Event written(device_.type());
    written.record(guard.getStream(device_));
    written.block(*copy_stream_);
  }
  const c10::StreamGuard on_copy(*copy_stream_);
  target.copy_(staging, /*non_blocking=*/true);
  event->record(*copy_stream_);
  return event;
}

void GradientReducer::launch(size_t index, PartitionedLayer& layer, const LayerRegion& region,
                             const std::vector<at::Tensor>& grads, bool first, int64_t begin, int64_t end) {
  auto& comm = *region.comm;
  const int world = comm.size(), rank = comm.rank();
  const int64_t length = end - begin;
  const int64_t split = layer.gradient_split();
  at::Tensor target = begin < split ? layer.grad_shard().narrow(0, begin, length)
                                    : layer.host_grad().narrow(0, begin - split, length);
  const bool direct = target.device() == device_;
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device_);
  // Positions in the region's flat layout: rank r's shard of it starts at r · shard.
  const int64_t shard = region.layout.shard_numel(), at = begin - region.shard_offset;
  if (world == 1 && direct) {  // nothing to communicate or stage: into the gradient itself
    flatten(region, grads, rank * shard + at, target, /*accumulate=*/!first);
    return;
  }
  const int64_t elements = (world > 1 ? world * length : 0) + (direct ? 0 : length);
  while (!in_flight_.empty() && in_flight_elements_ + elements > limit_) {
    const double start = base::now_s();
    retire_front();
    wait_s_ += base::now_s() - start;
  }
  Chunk chunk{.layer = index, .elements = elements};
  at::Tensor own;  // this rank's slice of what is reduced
  if (world > 1) {
    chunk.send = buffers_.take(world * length, options);
    for (int r = 0; r < world; ++r) {
      flatten(region, grads, r * shard + at, chunk.send.narrow(0, r * length, length), /*accumulate=*/false);
    }
    own = chunk.send.narrow(0, rank * length, length);
  } else {
    chunk.staging = buffers_.take(length, options);
    flatten(region, grads, rank * shard + at, chunk.staging, /*accumulate=*/false);
    own = chunk.staging;
  }
  // Later micro-batches: the accumulated values join this rank's slice, so the result is the sum.
  if (!first) own.add_(direct ? target : target.to(device_, /*non_blocking=*/target.is_pinned()));
  if (world > 1) {
    if (!direct) chunk.staging = buffers_.take(length, options);
    void* recv = direct ? target.data_ptr() : chunk.staging.data_ptr();
    chunk.work = comm.reduce_scatter(chunk.send.data_ptr(), recv, static_cast<size_t>(length), comm::DataType::f32,
                                      comm::ReduceOp::sum);
  }
  if (!direct) chunk.copied = copy_to_host(chunk.work.get(), chunk.staging, target);
  in_flight_elements_ += elements;
  ++outstanding_[index];
  in_flight_.push_back(std::move(chunk));
}

void GradientReducer::reduce(size_t index, PartitionedLayer& layer) {
  torch::NoGradGuard no_grad;
  if (outstanding_.size() <= index) outstanding_.resize(index + 1, 0);
  SO_CHECK(outstanding_[index] == 0, "layer " << index << " is reduced again before its last reduction finished");
  const bool first = layer.begin_reduction();
  const auto grads = layer.gradients();
  const int64_t split = layer.gradient_split();
  // Chunks never straddle the split (each has one destination) nor a region's end (each has
  // one communicator).
  for (const auto& region : layer.regions()) {
    const int64_t region_begin = region.shard_offset, region_end = region.shard_offset + region.layout.shard_numel();
    for (const auto& [part_begin, part_end] : {std::pair{int64_t{0}, split}, std::pair{split, layer.shard_numel()}}) {
      const int64_t from = std::max(part_begin, region_begin), to = std::min(part_end, region_end);
      // One rank, device part: written in place, in one pass (no buffer to bound).
      const int64_t step = region.comm->size() == 1 && part_begin == 0 ? std::max<int64_t>(to - from, 1)
                                                                       : chunk_per_rank(*region.comm);
      for (int64_t begin = from; begin < to; begin += step) {
        launch(index, layer, region, grads, first, begin, std::min(to, begin + step));
      }
    }
  }
  layer.clear_gradients();
  if (outstanding_[index] == 0) complete_.push_back(index);
}

void GradientReducer::retire_front(bool done) {
  auto chunk = std::move(in_flight_.front());
  in_flight_.pop_front();
  if (chunk.copied) {
    if (!done) chunk.copied->synchronize();  // also past the collective the copy waited for
  } else if (chunk.work) {
    chunk.work->wait();  // GPU: the compute stream waits for it before anything reuses the buffer
  }
  buffers_.give(std::move(chunk.send));
  buffers_.give(std::move(chunk.staging));
  in_flight_elements_ -= chunk.elements;
  if (--outstanding_[chunk.layer] == 0) complete_.push_back(chunk.layer);
}

std::vector<size_t> GradientReducer::poll() {
  while (!in_flight_.empty()) {
    auto& front = in_flight_.front();
    const bool done = front.copied ? front.copied->query() : !front.work || front.work->done();
    if (!done) break;
    retire_front(true);
  }
  return std::exchange(complete_, {});
}

std::vector<size_t> GradientReducer::finish() {
  const double start = base::now_s();
  while (!in_flight_.empty()) retire_front();
  wait_s_ += base::now_s() - start;
  return std::exchange(complete_, {});
}

double GradientReducer::take_wait_seconds() { return std::exchange(wait_s_, 0.0); }

}  // namespace superoffload::zero
