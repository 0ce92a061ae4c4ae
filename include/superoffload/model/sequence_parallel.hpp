// Ulysses sequence parallelism as the model sees it. The P ranks of a group train the same
// rows; rank r holds the contiguous shard [r·T/P, (r+1)·T/P) of every row's T tokens, and
// every layer but attention works on its shard alone. Attention trades sequence shards for
// head shards by all-to-all, attends over the whole sequence with H/P heads, and trades back
// (blocks/sequence_parallel_attention.hpp). The engine implements the group over its
// communicators (zero/sequence_parallel.hpp); a model never builds one. Installed for plugins.
#pragma once

#include <ATen/ATen.h>

namespace superoffload::model {

class SequenceParallelGroup {
 public:
  virtual ~SequenceParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // send [size(), ...] contiguous, the same shape on every rank: block r goes to rank r.
  // Returns the blocks received, [size(), ...]: block r came from rank r. Collective over the
  // group, without autograd (the attention wrapper's exchange carries gradients).
  virtual at::Tensor all_to_all(const at::Tensor& send) const = 0;
};

}  // namespace superoffload::model
