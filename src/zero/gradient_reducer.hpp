// Reduce-scatter of layer gradients in buckets, overlapped with backward ([zero]
// reduce_bucket_size).
//
// After a layer's backward, reduce() cuts this rank's shard of the layer into chunks of at most
// reduce_bucket_size / world elements (so that a chunk's send buffer, every rank's slice of it,
// holds at most reduce_bucket_size), flattens the gradients into each chunk's send buffer and
// starts its reduce-scatter without waiting. Each result lands where its optimizer reads it:
// the device part of the gradient (PartitionedLayer::grad_shard) straight from the collective;
// the host part (host_grad, the CPU optimizer's memory) through a device staging buffer and an
// asynchronous copy on a copy stream (on a GPU; on the CPU the collective writes it in place).
// Nothing waits until more than two chunks' buffers would be in flight, or until the caller needs
// every gradient (finish(), at the end of backward). poll() retires finished chunks without
// blocking — which is also what advances nonblocking MPI collectives — and returns the layers
// that are now complete, so the CPU optimizer starts on them while backward goes on.
//
// Accumulation over micro-batches is exact: a later micro-batch adds this rank's accumulated
// gradient into its own slice of the send buffer, so the collective writes the new sum (on a
// GPU the host part travels back for it, from pinned memory). One rank: no collective; the
// device part is written in place, the host part staged (in chunks of at most 2^25 elements)
// and copied as above.
//
// A layer partitioned in regions (expert parallelism: partitioned_layer.hpp) is reduced region
// by region, each over its own communicator: an expert's gradient only across its replicas.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.hpp"
#include "zero/buffer_cache.hpp"
#include "zero/partitioned_layer.hpp"

namespace superoffload::zero {

class GradientReducer {
 public:
  // One rank: the largest chunk (elements) that stages the CPU share's gradient for its copy to
  // host memory (128 MiB of fp32); the memory plan counts two of them.
  static constexpr int64_t kOneRankChunk = int64_t{1} << 25;

  // `bucket_elements`: [zero] reduce_bucket_size. Buffers come from `buffers` (the engine's).
  GradientReducer(comm::Communicator& comm, BufferCache& buffers, at::Device device, int64_t bucket_elements);

  // Starts the reduction of `layer`'s gradients (index `index`) and drops them.
  void reduce(size_t index, PartitionedLayer& layer);
  // Retires the chunks that have finished, in order; returns the layers now complete.
  std::vector<size_t> poll();
  // Waits for everything in flight; returns the layers now complete.
  std::vector<size_t> finish();
  // Seconds blocked waiting for collectives or copies since the last call (then reset).
  double take_wait_seconds();

 private:
  struct Chunk {
    size_t layer;
    std::unique_ptr<comm::Work> work;  // null: nothing to wait for but the copy
    at::Tensor send, staging;
    std::unique_ptr<c10::Event> copied;  // the staging → host copy (GPU)
    int64_t elements = 0;                // of send and staging
  };
  // [begin, end) of the layer's shard, within one region.
  void launch(size_t index, PartitionedLayer& layer, const LayerRegion& region, const std::vector<at::Tensor>& grads,
              bool first, int64_t begin, int64_t end);
  // Copies the gradient pieces of the region's flat range [begin, begin + dest.numel()) into
  // `dest`; zeros elsewhere (padding, parameters without a gradient), or adds them when `accumulate`.
  void flatten(const LayerRegion& region, const std::vector<at::Tensor>& grads, int64_t begin, at::Tensor dest,
               bool accumulate) const;
  int64_t chunk_per_rank(const comm::Communicator& comm) const;
  // Staging → host target, asynchronously on the copy stream after `work` (if any) completes.
  std::unique_ptr<c10::Event> copy_to_host(comm::Work* work, const at::Tensor& staging, at::Tensor target);
  // `done`: poll() saw its copy complete, so no synchronising call (the H200 traces counted 63
  // per step at 1.65B in the reduce scope, most of them after such a query).
  void retire_front(bool done = false);

  comm::Communicator& comm_;
  BufferCache& buffers_;
  at::Device device_;
  int64_t bucket_elements_;  // [zero] reduce_bucket_size
  int64_t limit_;            // elements in flight before reduce() waits
  std::optional<c10::Stream> copy_stream_;  // GPU: device → host copies
  std::deque<Chunk> in_flight_;
  std::vector<int64_t> outstanding_;  // chunks in flight per layer
  std::vector<size_t> complete_;      // layers completed since the last poll/finish
  int64_t in_flight_elements_ = 0;
  double wait_s_ = 0;
};

}  // namespace superoffload::zero
