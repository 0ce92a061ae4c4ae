// What the engine reports about itself: parameter memory and phase times. Torch-free, for
// the code that only logs and records them.
#pragma once

#include <cstdint>

namespace superoffload::zero {

// Device-resident elements, for logs and the memory test.
struct ParameterMemory {
  int64_t shard_numel = 0;           // this rank's shards, all layers
  int64_t live_numel = 0;            // gathered buffers now
  int64_t peak_live_numel = 0;       // the most gathered at once
  int64_t peak_resident_numel = 0;   // the most shards + gathered at once
  int64_t activation_bytes = 0;      // saved layer inputs at the peak of the last micro-batch
};

// Seconds spent per phase since reset_times(): compute excludes the waits counted apart.
struct PhaseTimes {
  double forward_s = 0;      // layer forwards (and the head's loss)
  double backward_s = 0;     // recompute + backward
  double gather_wait_s = 0;  // blocked waiting for all-gathers
  double reduce_s = 0;       // gradient flattening and reduce-scatter
  double reduce_wait_s = 0;  // of which blocked waiting for the reduce-scatter (communication)
};

}  // namespace superoffload::zero
