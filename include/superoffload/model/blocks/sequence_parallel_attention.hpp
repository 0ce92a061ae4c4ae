// Attention under Ulysses sequence parallelism (DeepSpeed Ulysses / ALST). Each rank projects
// q, k, v for its shard of the sequence; one all-to-all turns [shard of tokens, all heads] into
// [all tokens, a shard of heads], the rank attends over the whole sequence with its heads
// (document boundaries, windows and sinks as without parallelism), and a second all-to-all
// turns the output back into its shard of tokens. Both exchanges carry gradients: backward
// makes the same exchanges the other way.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>

#include "model/causal_lm.hpp"
#include "model/sequence_parallel.hpp"

namespace superoffload::model {

// attend(q [batch, heads/P, seq, d], k, v [batch, kv/P, seq, d], sinks [heads/P] or undefined)
// -> [batch, seq, heads/P * d]: attention over the whole sequence for this rank's heads.
using AttendHeads = std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& sinks)>;

// q [batch, heads, shard, d], k, v [batch, kv_heads, shard, d] of this rank's shard, positions
// already applied; `sinks` [heads] or undefined. Returns [batch, shard, heads * d]. Heads must
// divide by the group size; key/value heads must too, or divide it (then each is replicated
// for the ranks of its query heads, as ALST does) — checked, naming the numbers.
at::Tensor sequence_parallel_attention(const SequenceParallelGroup& group, const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& sinks, const AttendHeads& attend);

// Whether attention with these head counts can run over `group_size` ranks; else why not
// (empty when it can). For checks at load time, before any exchange.
std::string sequence_parallel_heads_problem(int64_t heads, int64_t kv_heads, int64_t group_size);

// A decoder layer's attention core, whatever the context: causal_attention (with `sinks` when
// defined) over the context's document_ids, directly, or through sequence_parallel_attention
// when the context has a sequence-parallel group. q [batch, heads, seq, d], k, v [batch,
// kv_heads, seq, d] of the rows (or shards) the layer holds; returns [batch, seq, heads * d].
at::Tensor causal_attention_in_context(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       int64_t sliding_window, const at::Tensor& sinks, const BatchContext& context);

// The autograd-carrying exchange itself: send [P, ...] -> received [P, ...] (group.all_to_all);
// its backward is the same exchange of the gradient. For blocks that shard other tensors.
at::Tensor exchange(const SequenceParallelGroup& group, const at::Tensor& send);

}  // namespace superoffload::model
