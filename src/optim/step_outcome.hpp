// What an optimizer reports about a step: the validation outcome and its phase times.
// Torch-free, for the code that only logs and records them.
#pragma once

#include <cstdint>

namespace superoffload::optim {

// What became of this rank's CPU sub-groups in a step (SuperOffload). Every CPU sub-group is
// either speculated (then committed, replayed or undone) or stepped late (or not at all in a
// skipped step).
struct SpeculationCounts {
  int64_t speculated = 0;  // stepped during backward
  int64_t committed = 0;   // speculated, kept: the step did not clip
  int64_t replayed = 0;    // speculated, then redone with the clipping coefficient (one fused pass)
  int64_t undone = 0;      // speculated, then undone: a gradient was not finite, the step is skipped
  int64_t late = 0;        // not speculated (policy, or ZeRO-Offload mode): stepped at step end
  // Speculation "auto": 1 when this rank stopped speculating on its prediction that the step
  // clips, before clipping was certain; mispredicted: and then the step did not clip (its
  // late sub-groups lost the overlap for nothing). Summed over ranks in metrics.h5.
  int64_t predicted_stops = 0;
  int64_t mispredicted_stops = 0;
};

// What validation decided for a step.
struct StepOutcome {
  double grad_norm = 0;  // global L2 norm of the reduced gradients (before clipping)
  bool clipped = false;  // gradients scaled by clip_coefficient()
  bool skipped = false;  // a gradient was not finite: nothing was stepped
  SpeculationCounts speculation;
  int64_t speculated_before_backward_end = 0;  // CPU sub-group steps that overlapped backward
};

// Seconds per optimizer phase in the last step (the logged wall-clock breakdown). An
// optimizer fills the phases it has.
struct OptimizerTimes {
  double d2h_s = 0;          // gradients to host memory (0 for SuperOffload: the engine reduces them
                             // into host memory, overlapped, counted in its reduce_s)
  double cpu_step_s = 0;     // SIMD AdamW on the host (speculated and after backward)
  double cpu_late_s = 0;     // of which after backward, on the step's critical path
  double device_step_s = 0;  // AdamW on the engine's device
  double h2d_s = 0;          // updated weights back to the device shards
  double wait_s = 0;         // step end waiting for speculated steps
  double rollback_s = 0;     // redoing (clipped) or undoing (skipped) speculated steps
  double norm_s = 0;         // the global gradient norm at step end (and its all-reduce)
  double total() const { return d2h_s + cpu_step_s + device_step_s + h2d_s + wait_s + rollback_s + norm_s; }
};

}  // namespace superoffload::optim
