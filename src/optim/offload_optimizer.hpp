// The SuperOffload optimizer. Each layer's gradient shard is cut into sub-groups of at most
// [zero] sub_group_size elements. The last `ratio` of them in parameter order (their
// gradients arrive first in backward) live on the host: as soon as a layer's shard is
// complete, its gradient is copied to host memory and a CPU worker steps those sub-groups
// at once with the SIMD AdamW, while backward continues (speculation). At step end the
// global gradient norm and a non-finite flag are all-reduced: no clipping needed and all
// finite → commit; clipping needed → redo the speculated sub-groups with the clipping
// coefficient (one fused pass: the step replaced in place); non-finite → undo them and skip
// the step. The first 1 − ratio of the sub-groups are stepped at step end on the device with
// LibTorch's fused AdamW. Updated shards go back to the device before the next forward.
//
// Which sub-groups are speculated (Speculation): `always` every CPU sub-group; `never` none
// (classic ZeRO-Offload: the CPU sub-groups are stepped after backward, same kernel);
// `automatic` stops speculating on this rank once it expects the step to clip. The worker adds
// up the squared norms of this rank's CPU gradients as they arrive, a lower bound of the
// global norm:
//   - certain: once the bound exceeds gradient_clipping the step clips whatever the other
//     ranks hold;
//   - predicted: after a clipped step, it stops once the bound exceeds gradient_clipping ×
//     the median share of the global norm this rank's CPU gradients carried in the last 8
//     finite steps (the bound extrapolated by the usual share says the step clips).
// Sub-groups not speculated are stepped once, at step end, with the coefficient. A wrong
// prediction costs the overlap of the sub-groups left late; a speculated sub-group of a
// clipped step costs a redo pass. The history is this rank's (export_rank_state): checkpoints
// keep it, so a resumed run decides as the uninterrupted one did and continues its trajectory
// bit for bit (a resume at another world size starts the history afresh).
#pragma once

#include <ATen/ATen.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/startup_timeline.hpp"
#include "cluster/host_memory.hpp"
#include "optim/cpu_adamw.hpp"
#include "optim/nvme_state.hpp"
#include "optim/optimizer.hpp"
#include "optim/thread_pool.hpp"
#include "zero/engine.hpp"

namespace superoffload::optim {

enum class Speculation { automatic, always, never };

struct OffloadSettings {
  AdamWSettings adamw;          // the kernel computes in fp32: the values are rounded to float
  int64_t sub_group_size = 1'000'000'000;
  double ratio = 1.0;           // share of sub-groups stepped on the CPU
  Speculation speculation = Speculation::automatic;
  std::vector<int> cpus;        // CPUs of the optimizer threads (first one: the worker)
  size_t threads = 1;           // when cpus is empty
  bool pin_memory = true;       // page-locked host buffers when the engine runs on a GPU
  // CPU sub-groups keep exp_avg and exp_avg_sq in bf16 (stochastic rounding; see cpu_adamw.hpp).
  // Device sub-groups keep fp32 moments. Export widens to fp32 (exactly); import rounds to
  // nearest.
  bool bf16_moments = false;
  // Not empty: the CPU sub-groups' state (master unless it is the engine's shard, and the
  // moments) lives in a file under this directory, streamed through `buffer_count` buffers
  // (nvme_state.hpp); the arithmetic is the same, so a run's losses are the same bit for bit.
  std::filesystem::path nvme_path;
  size_t buffer_count = 4;
};

class OffloadOptimizer final : public Optimizer {
 public:
  OffloadOptimizer(zero::ZeroEngine& engine, OffloadSettings settings);
  ~OffloadOptimizer() override;

  // Before the step's backward passes; `lr` is this step's learning rate.
  void begin_step(double lr) override;
  // A layer's shard is complete for this step: its CPU sub-groups' gradients go to host
  // memory and, unless speculation is `never`, are queued for the speculation worker.
  void gradient_ready(size_t layer) override;
  // When the step's backward passes are done: validates, commits / rolls back and replays /
  // skips, steps the device share, uploads. Collective over the engine's ranks.
  StepOutcome finish_step() override;
  const OptimizerTimes& times() const override { return times_; }
  std::vector<base::StartupPhase> setup_phases() const override {
    return {{"host buffers and pinning", host_buffers_cost_}};
  }
  std::vector<double> layer_seconds() const override { return layer_s_; }
  // Host fp32 copies (CPU sub-groups are not copied when the layer is one sub-group); import
  // also sets the device shard.
  ShardState export_layer(size_t layer) const override;
  // Whether export_layer copies a layer's state into fresh fp32 host tensors (true) or hands
  // over the optimizer's own: only a layer that is a single sub-group of the host share, held
  // in memory (not on NVMe) with fp32 moments, goes as it is. The host memory plan asks the
  // same of the largest layer (train/memory_plan), so the two cannot drift apart.
  static bool export_copies(size_t sub_groups, bool in_host_share, bool on_nvme, bool bf16_moments) {
    return sub_groups != 1 || !in_host_share || on_nvme || bf16_moments;
  }
  void import_layer(size_t layer, const ShardState& state) override;
  // By field where the state is in host memory; the NVMe tier's regions hold a sub-group's
  // three fields together and are written whole.
  bool imports_by_field() const override { return !nvme_; }
  void import_field(size_t layer, StateField field, const at::Tensor& values) override;
  void finish_import(size_t layer, int64_t steps) override;
  std::string describe() const override;
  // The speculation worker and the pool's workers. The training thread, which runs the first
  // block of the pool's work after backward (ZeRO-Offload steps, replays), is not among them.
  std::vector<pid_t> thread_ids() override;
  std::string export_rank_state() const override;
  void import_rank_state(const std::string& json) override;

  size_t sub_groups() const { return groups_.size(); }
  size_t cpu_sub_groups() const;

 private:
  struct Piece {
    int64_t begin, end;  // within the sub-group
    bool decay;
  };
  struct SubGroup {
    size_t layer;
    int64_t begin, end;  // within the layer shard
    bool on_cpu = false;
    std::vector<Piece> pieces;
    at::Tensor master, exp_avg, exp_avg_sq;  // [end - begin]; host for CPU sub-groups; moments fp32 or bf16
    at::Tensor grad;                         // host copy of this step's gradient (CPU sub-groups; on a
                                             // CPU run a view of the engine's gradient shard)
    at::Tensor bf16;                         // updated weights in bf16 (CPU sub-groups, bf16 runs; on
                                             // a CPU run a view of the engine's shard)
    int64_t steps = 0;
    bool speculated = false;
    double finished_at = 0;
    int64_t region = -1;  // with the NVMe tier: its region of the state file (then master,
                          // unless the engine's shard, and the moments are undefined here)
  };
  // A CPU sub-group's state, wherever it lives: its own tensors, or views of the NVMe buffer
  // that holds it until release_state.
  struct StateTensors {
    at::Tensor master, exp_avg, exp_avg_sq;
  };
  // `load` false: the caller overwrites the whole state, so the NVMe tier need not read it.
  StateTensors acquire_state(const SubGroup& group, bool load = true) const;
  void release_state(const SubGroup& group, bool dirty) const;
  // An import's last word on a layer's master: the engine's shard from it.
  void set_shard_from_master(size_t layer, const at::Tensor& master);
  // Starts reading the state of groups_[i] for the i in `upcoming` (the NVMe tier; as many as
  // there are free buffers).
  void prefetch(const std::vector<size_t>& upcoming) const;

  // The key of the stochastic rounding of this sub-group's bf16 moments at its current step.
  RoundingStream rounding(size_t group_index, int64_t offset) const;
  // One kernel pass over a CPU sub-group at its current step count, on the pool.
  void run_pass(SubGroup& group, const StateTensors& state, AdamWPass pass, float grad_scale);
  // acquire_state, prefetch(upcoming), run_pass, release_state.
  void step_cpu(SubGroup& group, AdamWPass pass, float grad_scale, const std::vector<size_t>& upcoming = {});
  // Why the worker stops speculating, given this rank's squared CPU-gradient norm so far (see
  // the file comment); none: it goes on.
  enum class Stop { none, non_finite, certain, predicted };
  Stop stop_for(double local_squared_norm) const;
  // auto's history after a step's validation (its finite steps only).
  void learn(const StepOutcome& outcome);
  void step_device(SubGroup& group, double grad_scale);
  void upload();
  void worker_loop();
  void wait_for_worker();

  zero::ZeroEngine& engine_;
  OffloadSettings s_;
  // The hyper-parameters as the fp32 kernel uses them.
  float beta1_, beta2_, eps_, weight_decay_;
  std::vector<SubGroup> groups_;
  std::vector<std::vector<size_t>> groups_of_layer_;
  ThreadPool pool_;
  std::unique_ptr<cluster::HostMemory> host_memory_;
  base::PhaseCost host_buffers_cost_;  // allocating (and pinning) host_memory_, for the start-up timeline
  mutable std::unique_ptr<NvmeStateFile> nvme_;  // read and written by const exports too
  bool master_is_shard_ = false;
  double lr_ = 0;
  OptimizerTimes times_;
  std::vector<double> layer_s_;  // this step's, per layer (the worker's part written before wait_for_worker returns)
  bool bf16_ = false;
  bool shares_engine_memory_ = false;  // CPU run: gradients and weights are the engine's tensors

  // The speculation worker: steps queued sub-groups in order.
  std::thread worker_;
  pid_t worker_tid_ = 0;  // set by the worker as it starts (under mutex_)
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<size_t> queue_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr worker_error_;  // an error of the worker, rethrown to the training thread
  double backward_end_ = 0;
  // This step's speculation state (worker; read by finish_step after wait_for_worker).
  double local_squared_norm_ = 0;  // of the CPU gradients the worker has seen
  size_t summed_groups_ = 0;       // how many sub-groups that sum covers
  size_t cpu_groups_ = 0;          // sub-groups on the CPU: all summed, the norm needs no second pass
  Stop stopped_ = Stop::none;
  // auto's prediction: this rank's share of the global norm (its CPU gradients' norm / the
  // global norm) in the last kShareHistory finite steps, and whether the last one clipped.
  static constexpr size_t kShareHistory = 8;
  std::deque<double> recent_shares_;
  bool last_clipped_ = false;
};

}  // namespace superoffload::optim
