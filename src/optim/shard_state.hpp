// One layer's optimizer state on this rank, as host fp32 tensors: what a checkpoint holds
// and what a resume puts back. Every optimizer exports and imports it.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace superoffload::optim {

struct ShardState {
  at::Tensor master, exp_avg, exp_avg_sq;  // fp32, CPU, [shard_numel], contiguous
  int64_t steps = 0;                       // optimizer steps taken (bias correction)
  // From export_layer: the tensors are a copy made for the caller (true), or the optimizer's
  // own state (false), which its next step changes (a background save copies those).
  bool copied = false;
};

}  // namespace superoffload::optim
