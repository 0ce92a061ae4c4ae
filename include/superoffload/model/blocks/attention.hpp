// Causal self-attention core over projected q, k, v: grouped-query heads, optional sliding
// window, through at::scaled_dot_product_attention's fused kernels, or FlashAttention's
// variable-length kernel for packed documents and sliding windows on a GPU in bf16/fp16. A row
// of more than 4,096 tokens builds no [seq, seq] tensor on any device (windows in blocks of
// queries, packed documents one by one).
#pragma once

#include <ATen/ATen.h>

namespace superoffload::model {

// q [batch, heads, seq, head_dim]; k, v [batch, kv_heads, seq, head_dim]. A token sees the
// `sliding_window` most recent positions (itself included) when sliding_window > 0, else
// all earlier ones; with `document_ids` ([batch, seq], BatchContext) only those of its own
// document. Returns [batch, seq, heads * head_dim].
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t sliding_window,
                            const at::Tensor& document_ids = {});

// The same with a learned sink logit per head (GPT-OSS): an extra softmax column that takes
// probability mass and is then dropped. Computed explicitly (no fused kernel has sinks): a
// long row in blocks of queries whose scores (about 32 MiB each) are made again in backward.
at::Tensor causal_attention_with_sinks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       int64_t sliding_window, const at::Tensor& sinks,
                                       const at::Tensor& document_ids = {});

}  // namespace superoffload::model
