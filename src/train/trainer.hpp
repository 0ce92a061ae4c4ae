// `superoffload train`: sets up the model, engine, optimizer, data, checkpoints and metrics,
// then loops over train/step.hpp's step with the LR schedule, the per-step log line (rank 0),
// periodic and preemption checkpoints, and a timing summary at the end.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "cluster/binding.hpp"
#include "config/config.hpp"
#include "train/throughput.hpp"

namespace superoffload::cluster {
class MpiWorld;
}

namespace superoffload::train {

struct TrainSummary {
  int64_t first_step = 0;   // steps before this run (resumed from a checkpoint)
  int64_t steps = 0;        // the last step reached
  std::vector<double> losses;  // of the steps this run took
  double mean_step_s = 0;   // excluding the first training.timing_warmup_steps; 0: no step timed
  Throughput throughput;    // of the mean step
  int64_t skipped_steps = 0;
  int stop_signal = 0;      // the run stopped early on this signal, after a checkpoint
  bool stopped_early = false;  // [training] early_stopping_patience ran out
  double eval_loss = NAN;       // of the last evaluation (NaN: none)
  double best_eval_loss = NAN;  // the lowest so far, over the resumed run's earlier ones too
  int64_t best_eval_step = -1;
};

// `binding_table`: the start-up binding report (stored with the metrics). `resume`: ""
// (start fresh, unless [checkpoint] auto_resume finds `latest`), "latest" or a checkpoint
// directory.
TrainSummary run_training(const config::Config& config, const cluster::MpiWorld& world,
                          const cluster::RankBinding& binding, const std::vector<std::string>& binding_table,
                          const std::string& resume = {});

}  // namespace superoffload::train
