// Packed documents laid end to end for FlashAttention's varlen kernel: int32 cumulative starts
// [documents + 1] over batch × seq tokens, and the longest document. Both need host reads of
// device values (a nonzero and a max) that every layer's attention, in forward and in
// recompute, would repeat for the same micro-batch. While a VarlenLayoutCache lives on this
// thread (the ZeRO engine holds one per micro-batch), the layout is computed once per
// document_ids tensor; it and its device tensors go when the cache does (never a static
// holding CUDA memory at exit). Internal to the host: not part of the plugin headers.
#pragma once

#include <ATen/ATen.h>

namespace superoffload::model {

struct VarlenLayout {
  at::Tensor starts;  // int32 [documents + 1], on the device of document_ids
  int64_t longest = 0;
};

// The layout of `document_ids` ([batch, seq], rising along a row), from the thread's cache when
// one is open and already holds it.
VarlenLayout varlen_layout(const at::Tensor& document_ids);

class VarlenLayoutCache {
 public:
  VarlenLayoutCache();
  ~VarlenLayoutCache();
  VarlenLayoutCache(const VarlenLayoutCache&) = delete;
  VarlenLayoutCache& operator=(const VarlenLayoutCache&) = delete;

 private:
  friend VarlenLayout varlen_layout(const at::Tensor& document_ids);
  at::Tensor documents_;  // the key, held so that its storage is not another batch's meanwhile
  uint32_t version_ = 0;  // an in-place change of the key shows here
  VarlenLayout layout_;
  VarlenLayoutCache* previous_;
};

}  // namespace superoffload::model
