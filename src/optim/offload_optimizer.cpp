// OffloadOptimizer (see offload_optimizer.hpp for the protocol).
#include "optim/offload_optimizer.hpp"

#include <pthread.h>
#include <sched.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/timer.hpp"
#include "optim/cpu_adamw.hpp"

namespace superoffload::optim {

using base::now_s;
using base::ScopedTime;

namespace {

// The CPU kernel works on contiguous runs; the pool splits a run among its threads.
constexpr size_t kAlign = 64;

// The squared L2 norm, +inf when an element is not finite, on the optimizer's own pool. (An
// ATen reduction called from the speculation worker ran on an OpenMP team of that thread,
// which competed with the pool for the bound cores: on a 16-core H100 node the speculated CPU
// steps took 6x longer.) Per-thread sums in double, in a loop the compiler vectorises.
double squared_norm(ThreadPool& pool, const float* data, size_t n) {
  std::mutex mutex;
  double total = 0;
  pool.parallel_for(n, kAlign, [&](size_t b, size_t e) {
    double sum = 0;
    for (size_t i = b; i < e; ++i) sum += static_cast<double>(data[i]) * static_cast<double>(data[i]);
    std::lock_guard lock(mutex);
    total += sum;
  });
  return std::isfinite(total) ? total : INFINITY;  // NaN too
}

uint16_t* bf16_bits(const at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

}  // namespace

OffloadOptimizer::OffloadOptimizer(zero::ZeroEngine& engine, OffloadSettings settings)
    : engine_(engine),
      s_(std::move(settings)),
      beta1_(static_cast<float>(s_.adamw.beta1)),
      beta2_(static_cast<float>(s_.adamw.beta2)),
      eps_(static_cast<float>(s_.adamw.eps)),
      weight_decay_(static_cast<float>(s_.adamw.weight_decay)),
      pool_(s_.cpus.empty() ? s_.threads : s_.cpus.size(), s_.cpus) {
  SO_CHECK(s_.sub_group_size >= 1, "[zero] sub_group_size must be positive");
  SO_CHECK(s_.ratio >= 0 && s_.ratio <= 1, "[offload] ratio must lie in [0, 1]");
  const int rank = engine_.comm().rank();
  auto& layers = engine_.layers();
  bf16_ = !layers.empty() && layers[0].compute_dtype() == at::kBFloat16;
  groups_of_layer_.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& layout = layers[l].layout();
    const auto pieces = layout.pieces(rank);
    const auto values = layers[l].shard_fp32().to(at::kCPU);
    for (int64_t begin = 0; begin < layout.shard_numel(); begin += s_.sub_group_size) {
      SubGroup g;
      g.layer = l;
      g.begin = begin;
      g.end = std::min(layout.shard_numel(), begin + s_.sub_group_size);
      // Runs of equal weight decay inside the sub-group (padding takes none).
      int64_t at = g.begin;
      for (const auto& piece : pieces) {
        const int64_t from = std::max(g.begin, piece.shard_offset), to = std::min(g.end, piece.shard_offset + piece.length);
        if (from >= to) continue;
        if (from > at) g.pieces.push_back({at - g.begin, from - g.begin, false});
        g.pieces.push_back({from - g.begin, to - g.begin, layout.parameters()[piece.parameter].weight_decay});
        at = to;
      }
      if (at < g.end) g.pieces.push_back({at - g.begin, g.end - g.begin, false});
      g.master = values.narrow(0, g.begin, g.end - g.begin).clone();
      g.exp_avg = at::zeros_like(g.master);
      g.exp_avg_sq = at::zeros_like(g.master);
      groups_of_layer_[l].push_back(groups_.size());
      groups_.push_back(std::move(g));
    }
  }
  // The first 1 − ratio of the sub-groups in parameter order go to the device.
  const auto on_device = static_cast<size_t>(std::floor((1.0 - s_.ratio) * static_cast<double>(groups_.size()) + 1e-9));
  const auto device = layers.empty() ? at::Device(at::kCPU) : layers[0].device();
  // On a CPU run the engine's memory is host memory: the CPU sub-groups read the gradient
  // shard where the engine reduced it and write the updated weights straight into the
  // engine's shard (the master itself in fp32, the bf16 copy in bf16). Nothing is copied.
  shares_engine_memory_ = device.is_cpu();
  const bool master_is_shard = shares_engine_memory_ && !layers.empty() && layers[0].compute_dtype() == at::kFloat;
  // What the CPU sub-groups keep in host memory of their own: master, moments, gradient, bf16 copy.
  const int64_t bytes_per_element =
      (master_is_shard ? 0 : 4) + (s_.bf16_moments ? 4 : 8) + (shares_engine_memory_ ? 0 : 4 + (bf16_ ? 2 : 0));
  int64_t host_bytes = 0;
  for (size_t i = on_device; i < groups_.size(); ++i) host_bytes += bytes_per_element * (groups_[i].end - groups_[i].begin);
  host_memory_ = std::make_unique<HostMemory>(device.is_cuda() && s_.pin_memory, host_bytes);
  for (size_t i = 0; i < groups_.size(); ++i) {
    auto& g = groups_[i];
    g.on_cpu = i >= on_device;
    auto engine_view = [&](const at::Tensor& t) { return t.narrow(0, g.begin, g.end - g.begin); };
    if (g.on_cpu) {
      auto place = [&](const at::Tensor& values, at::ScalarType type) {
        auto t = host_memory_->empty(values.sizes(), type);
        t.copy_(values);
        return t;
      };
      const auto moments = s_.bf16_moments ? at::kBFloat16 : at::kFloat;
      g.master = master_is_shard ? engine_view(layers[g.layer].shard()) : place(g.master, at::kFloat);
      g.exp_avg = place(g.exp_avg, moments);
      g.exp_avg_sq = place(g.exp_avg_sq, moments);
      g.grad = shares_engine_memory_ ? engine_view(layers[g.layer].grad_shard())
                                     : host_memory_->empty(g.master.sizes(), at::kFloat);
      if (bf16_) {
        g.bf16 = shares_engine_memory_ ? engine_view(layers[g.layer].shard())
                                       : host_memory_->empty(g.master.sizes(), at::kBFloat16);
      }
    } else {
      g.master = master_is_shard ? engine_view(layers[g.layer].shard()) : g.master.to(device);
      g.exp_avg = g.exp_avg.to(device);
      g.exp_avg_sq = g.exp_avg_sq.to(device);
    }
  }
  worker_ = std::thread([this] {
    if (!s_.cpus.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(s_.cpus.front(), &set);
      pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    worker_loop();
  });
}

OffloadOptimizer::~OffloadOptimizer() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

size_t OffloadOptimizer::cpu_sub_groups() const {
  size_t n = 0;
  for (const auto& g : groups_) n += g.on_cpu ? 1 : 0;
  return n;
}

std::string OffloadOptimizer::describe() const {
  std::ostringstream text;
  const char* mode = s_.speculation == Speculation::never   ? "ZeRO-Offload (CPU steps after backward)"
                     : s_.speculation == Speculation::always ? "SuperOffload (every CPU step speculated during backward)"
                                                             : "SuperOffload (CPU steps speculated during backward until "
                                                               "clipping is certain)";
  text << mode
       << ", " << cpu_sub_groups() << " of " << sub_groups() << " sub-groups on the CPU (ratio " << s_.ratio << "), SIMD "
       << adamw_target() << ", " << pool_.size() << " thread(s)" << (s_.bf16_moments ? ", bf16 moments" : "");
  return text.str();
}

ShardState OffloadOptimizer::export_layer(size_t layer) const {
  std::vector<at::Tensor> master, exp_avg, exp_avg_sq;
  int64_t steps = -1;
  for (size_t i : groups_of_layer_[layer]) {
    const auto& g = groups_[i];
    master.push_back(g.master.to(at::kCPU));
    exp_avg.push_back(g.exp_avg.to(at::kCPU, at::kFloat));  // bf16 moments widen exactly
    exp_avg_sq.push_back(g.exp_avg_sq.to(at::kCPU, at::kFloat));
    SO_CHECK(steps < 0 || steps == g.steps, "sub-groups of layer " << layer << " disagree on their step count");
    steps = g.steps;
  }
  auto join = [](std::vector<at::Tensor>& parts) { return parts.size() == 1 ? parts[0] : at::cat(parts); };
  return {join(master), join(exp_avg), join(exp_avg_sq), std::max<int64_t>(steps, 0)};
}

void OffloadOptimizer::import_layer(size_t layer, const ShardState& state) {
  wait_for_worker();
  for (size_t i : groups_of_layer_[layer]) {
    auto& g = groups_[i];
    const int64_t length = g.end - g.begin;
    g.master.copy_(state.master.narrow(0, g.begin, length));
    g.exp_avg.copy_(state.exp_avg.narrow(0, g.begin, length));  // to bf16 moments: nearest-even
    g.exp_avg_sq.copy_(state.exp_avg_sq.narrow(0, g.begin, length));
    g.steps = state.steps;
    g.speculated = false;
  }
  // The compute-dtype shard from the fp32 master, rounded as the CPU kernel's bf16 copy is.
  engine_.layers()[layer].set_shard(state.master.to(engine_.layers()[layer].device()));
}

void OffloadOptimizer::begin_step(double lr) {
  wait_for_worker();
  lr_ = lr;
  times_ = {};
  backward_end_ = 0;
  for (auto& g : groups_) {
    g.speculated = false;
    g.finished_at = 0;
  }
  local_squared_norm_ = 0;
  stopped_speculating_ = false;
}

bool OffloadOptimizer::speculation_pays(double local_squared_norm) const {
  const double clip = s_.adamw.gradient_clipping;
  if (s_.speculation == Speculation::always || clip <= 0) return true;
  // This rank's norm so far is ≤ the global norm: beyond the threshold clipping is certain.
  return std::sqrt(local_squared_norm) <= clip;
}

void OffloadOptimizer::gradient_ready(size_t layer) {
  auto& shard_grad = engine_.layers()[layer].grad_shard();
  std::vector<size_t> queued;
  {
    ScopedTime timed(times_.d2h_s);
    for (size_t i : groups_of_layer_[layer]) {
      auto& g = groups_[i];
      if (!g.on_cpu) continue;
      // fp32 already (the engine reduces in fp32); on a GPU this is the device-to-host copy.
      // On a CPU run g.grad is the engine's shard itself.
      if (!shares_engine_memory_) g.grad.copy_(shard_grad.narrow(0, g.begin, g.end - g.begin));
      queued.push_back(i);
    }
  }
  if (s_.speculation == Speculation::never || queued.empty()) return;
  {
    std::lock_guard lock(mutex_);
    for (size_t i : queued) queue_.push_back(i);
  }
  wake_.notify_all();
}

void OffloadOptimizer::worker_loop() {
  for (;;) {
    size_t index;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      index = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    const double start = now_s();
    std::exception_ptr error;
    try {
      // Once speculation stops it stays stopped for the step: the rest wait for step end.
      // A non-finite gradient is never stepped speculatively: its step could not be undone
      // (inf − inf is NaN); the step-end validation sees it in the global norm and skips.
      auto& g = groups_[index];
      if (!stopped_speculating_) {
        local_squared_norm_ += squared_norm(pool_, g.grad.data_ptr<float>(), static_cast<size_t>(g.grad.numel()));
        stopped_speculating_ = !std::isfinite(local_squared_norm_) || !speculation_pays(local_squared_norm_);
      }
      if (!stopped_speculating_) {
        ++g.steps;
        run_pass(g, AdamWPass::step, 1.0f);
        g.speculated = true;
      }
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      times_.cpu_step_s += now_s() - start;
      if (groups_[index].speculated) groups_[index].finished_at = now_s();
      if (error && !worker_error_) worker_error_ = error;
      busy_ = false;
    }
    idle_.notify_all();
  }
}

void OffloadOptimizer::wait_for_worker() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
  if (worker_error_) std::rethrow_exception(std::exchange(worker_error_, nullptr));
}

RoundingStream OffloadOptimizer::rounding(size_t group_index, int64_t offset) const {
  // Ranks and sub-groups draw different bits; a step's bits do not depend on the threads.
  const uint64_t id = (static_cast<uint64_t>(engine_.comm().rank()) << 32) | group_index;
  return {moment_rounding_key(id, groups_[group_index].steps), static_cast<uint64_t>(offset)};
}

void OffloadOptimizer::run_pass(SubGroup& g, AdamWPass pass, float grad_scale) {
  const size_t index = static_cast<size_t>(&g - groups_.data());
  float* p = g.master.data_ptr<float>();
  const float* grad = g.grad.data_ptr<float>();
  uint16_t* out = bf16_ ? bf16_bits(g.bf16) : nullptr;
  for (const auto& piece : g.pieces) {
    const AdamWStep step{.lr = static_cast<float>(lr_),
                         .beta1 = beta1_,
                         .beta2 = beta2_,
                         .eps = eps_,
                         .weight_decay = piece.decay ? weight_decay_ : 0.0f,
                         .decoupled = s_.adamw.decoupled,
                         .step = g.steps,
                         .grad_scale = grad_scale};
    pool_.parallel_for(static_cast<size_t>(piece.end - piece.begin), kAlign, [&](size_t b, size_t e) {
      const size_t o = static_cast<size_t>(piece.begin) + b;
      uint16_t* bf16_copy = out ? out + o : nullptr;
      if (s_.bf16_moments) {
        adamw_pass(pass, step, p + o, bf16_bits(g.exp_avg) + o, bf16_bits(g.exp_avg_sq) + o, grad + o, bf16_copy, e - b,
                   rounding(index, static_cast<int64_t>(o)));
      } else {
        adamw_pass(pass, step, p + o, g.exp_avg.data_ptr<float>() + o, g.exp_avg_sq.data_ptr<float>() + o, grad + o,
                   bf16_copy, e - b);
      }
    });
  }
}

void OffloadOptimizer::step_device(SubGroup& g, double grad_scale) {
  torch::NoGradGuard no_grad;
  ++g.steps;
  auto grad = engine_.layers()[g.layer].grad_shard().narrow(0, g.begin, g.end - g.begin);
  if (grad_scale != 1.0) grad = grad * grad_scale;
  for (const auto& piece : g.pieces) {
    const int64_t length = piece.end - piece.begin;
    auto step = at::full({}, static_cast<double>(g.steps), g.master.options());
    at::_fused_adamw_({g.master.narrow(0, piece.begin, length)}, {grad.narrow(0, piece.begin, length)},
                      {g.exp_avg.narrow(0, piece.begin, length)}, {g.exp_avg_sq.narrow(0, piece.begin, length)}, {},
                      {step}, lr_, beta1_, beta2_, piece.decay ? weight_decay_ : 0.0, eps_, false, false);
  }
}

void OffloadOptimizer::upload() {
  ScopedTime timed(times_.h2d_s);
  auto& layers = engine_.layers();
  for (size_t l = 0; l < layers.size(); ++l) {
    if (shares_engine_memory_) {
      // CPU run: what was not written into the shard in place (bf16 runs: the sub-groups
      // stepped by LibTorch's fused AdamW) is copied into it.
      auto shard = layers[l].shard();
      for (size_t i : groups_of_layer_[l]) {
        const auto& g = groups_[i];
        const auto& source = g.on_cpu && bf16_ ? g.bf16 : g.master;
        auto target = shard.narrow(0, g.begin, g.end - g.begin);
        if (source.data_ptr() != target.data_ptr()) target.copy_(source);
      }
      layers[l].shard_updated();
      continue;
    }
    std::vector<at::Tensor> parts;
    for (size_t i : groups_of_layer_[l]) {
      const auto& g = groups_[i];
      // The CPU kernel already wrote the bf16 copy: the link carries the narrow type. From
      // pinned memory the copy is asynchronous, queued on the compute stream before the next
      // forward (which is on the same stream), so it needs no host synchronisation.
      const auto& source = g.on_cpu && bf16_ ? g.bf16 : g.master;
      parts.push_back(source.to(layers[l].device(), /*non_blocking=*/source.is_pinned()));
    }
    layers[l].set_shard(at::cat(parts));
  }
}

StepOutcome OffloadOptimizer::finish_step() {
  StepOutcome outcome;
  backward_end_ = now_s();
  // Global norm and non-finite flag from the reduced gradients (one all-reduce).
  outcome.grad_norm = engine_.global_grad_norm();
  const bool finite = std::isfinite(outcome.grad_norm);
  const double coefficient = clip_coefficient(s_.adamw.gradient_clipping, outcome.grad_norm);
  outcome.clipped = finite && coefficient < 1.0;
  outcome.skipped = !finite;

  {
    ScopedTime timed(times_.wait_s);
    wait_for_worker();
  }
  for (const auto& g : groups_) {
    if (g.speculated && g.finished_at > 0 && g.finished_at < backward_end_) ++outcome.speculated_before_backward_end;
  }
  const float scale = outcome.clipped ? static_cast<float>(coefficient) : 1.0f;
  auto& counts = outcome.speculation;
  {
    ScopedTime timed(times_.rollback_s);
    for (auto& g : groups_) {
      if (!g.speculated) continue;
      ++counts.speculated;
      if (outcome.skipped) {  // nothing is stepped: back to the weights of the last good step
        run_pass(g, AdamWPass::undo, 1.0f);
        --g.steps;
        ++counts.undone;
      } else if (outcome.clipped) {
        run_pass(g, AdamWPass::redo, scale);
        ++counts.replayed;
      } else {
        ++counts.committed;
      }
    }
  }
  if (outcome.skipped) return outcome;
  {
    ScopedTime timed(times_.cpu_step_s);
    for (auto& g : groups_) {
      if (g.on_cpu && !g.speculated) {
        ++g.steps;
        run_pass(g, AdamWPass::step, scale);
        ++counts.late;
      }
    }
  }
  {
    ScopedTime timed(times_.device_step_s);
    for (auto& g : groups_) {
      if (!g.on_cpu) step_device(g, outcome.clipped ? coefficient : 1.0);
    }
  }
  upload();
  return outcome;
}

}  // namespace superoffload::optim
