// OffloadOptimizer (see offload_optimizer.hpp for the protocol).
#include "optim/offload_optimizer.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/startup_timeline.hpp"
#include "base/timer.hpp"
#include "optim/cpu_adamw.hpp"
#include "optim/pooled_norm.hpp"
#include "zero/trace_scope.hpp"

namespace superoffload::optim {

using base::now_s;
using base::ScopedTime;

namespace {

// The CPU kernel works on contiguous runs; the pool splits a run among its threads.
constexpr size_t kAlign = 64;

// The median of a few values (the mean of the middle two for an even count).
double median(const std::deque<double>& values) {
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

uint16_t* bf16_bits(const at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

// A sub-group's region of the NVMe state file: [master, if it is not the engine's shard]
// [exp_avg][exp_avg_sq], each starting on a 64-byte boundary.
uint64_t aligned(uint64_t n) { return (n + 63) / 64 * 64; }
uint64_t region_bytes(int64_t n, bool has_master, bool bf16_moments) {
  const auto elements = static_cast<uint64_t>(n);
  const uint64_t moment = elements * (bf16_moments ? 2 : 4);
  return (has_master ? aligned(elements * 4) : 0) + aligned(moment) + moment;
}

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
  layer_s_.assign(layers.size(), 0.0);
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& layout = layers[l].layout();
    const auto& pieces = layers[l].shard_pieces();
    const int64_t shard = layers[l].shard_numel();
    for (int64_t begin = 0; begin < shard; begin += s_.sub_group_size) {
      SubGroup g;
      g.layer = l;
      g.begin = begin;
      g.end = std::min(shard, begin + s_.sub_group_size);
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
  master_is_shard_ = master_is_shard;
  const bool nvme = !s_.nvme_path.empty();
  // What the CPU sub-groups keep of their own: master, moments (in host memory, or in the NVMe
  // tier's file), gradient and bf16 copy (in host memory).
  // The gradient of the CPU share lives here too: the engine reduces it into this memory.
  const int64_t state_bytes_per_element = (master_is_shard ? 0 : 4) + (s_.bf16_moments ? 4 : 8);
  const int64_t bytes_per_element =
      (nvme ? 0 : state_bytes_per_element) + 4 + (shares_engine_memory_ || !bf16_ ? 0 : 2);
  int64_t host_bytes = 0;
  for (size_t i = on_device; i < groups_.size(); ++i) host_bytes += bytes_per_element * (groups_[i].end - groups_[i].begin);
  // At most four buffers per CPU sub-group (master, moments, bf16 copy) and a gradient per layer.
  const auto buffers = 4 * static_cast<int64_t>(groups_.size() - std::min(on_device, groups_.size())) +
                       static_cast<int64_t>(layers.size());
  base::add_cost(host_buffers_cost_, [&] {
    host_memory_ = std::make_unique<cluster::HostMemory>(device.is_cuda() && s_.pin_memory, host_bytes);
    host_memory_->reserve(host_bytes, buffers);
  });
  // Every host buffer's mapping, first touch and pinning is timed as its own start-up phase
  // (the rest of "optimizer state" is filling them).
  auto host_empty = [this](at::IntArrayRef sizes, at::ScalarType type, bool zeroed = false) {
    at::Tensor t;
    base::add_cost(host_buffers_cost_,
                   [&] { t = zeroed ? host_memory_->zeros(sizes, type) : host_memory_->empty(sizes, type); });
    return t;
  };
  if (nvme) {
    std::vector<uint64_t> regions;
    for (size_t i = on_device; i < groups_.size(); ++i) {
      groups_[i].region = static_cast<int64_t>(regions.size());
      regions.push_back(region_bytes(groups_[i].end - groups_[i].begin, !master_is_shard, s_.bf16_moments));
    }
    nvme_ = std::make_unique<NvmeStateFile>(s_.nvme_path, rank, regions, s_.buffer_count);
  }
  // Each layer's CPU sub-groups are the end of its shard: their gradient is one host tensor,
  // where the engine reduces it (and copies it from the device on a GPU run).
  for (size_t l = 0; l < layers.size(); ++l) {
    int64_t split = layers[l].shard_numel();
    for (size_t i : groups_of_layer_[l]) {
      if (i >= on_device) split = std::min(split, groups_[i].begin);
    }
    const int64_t host_numel = layers[l].shard_numel() - split;
    layers[l].place_gradient(split, host_numel > 0 ? host_empty({host_numel}, at::kFloat) : at::Tensor());
  }
  // Each state buffer is made once, where it stays, in its own dtype: the master from the
  // engine's shard (fp32 values of one layer at a time), moments zeroed in place. (Making fp32
  // copies and zeros first and placing them after cost 12 bytes per parameter of transient host
  // memory and most of the set-up time: 12.3 GB and 34 s for a 1.1B model at 1 rank.)
  // The fp32 values of one layer's shard, where the shard is: on a GPU run each sub-group's
  // values are copied from the device straight into their pinned host buffer. (A pageable host
  // copy of each layer first cost a fresh allocation, its page faults and a pageable copy per
  // layer on one thread: an 8B's 28 GB, most of its 29 s of "optimizer state" on an H200.)
  at::Tensor layer_values;
  size_t values_of = layers.size();
  auto shard_values = [&](const SubGroup& g) {
    if (values_of != g.layer) {
      layer_values = at::Tensor();  // the last layer's values go before this one's are made
      layer_values = layers[g.layer].shard_fp32();
      values_of = g.layer;
    }
    return layer_values.narrow(0, g.begin, g.end - g.begin);
  };
  for (size_t i = 0; i < groups_.size(); ++i) {
    auto& g = groups_[i];
    g.on_cpu = i >= on_device;
    const int64_t numel = g.end - g.begin;
    auto engine_view = [&](const at::Tensor& t) { return t.narrow(0, g.begin, numel); };
    if (g.on_cpu) {
      auto place = [&](const at::Tensor& values, at::ScalarType type) {
        auto t = host_empty(values.sizes(), type);
        t.copy_(values);
        return t;
      };
      auto zeroed = [&](at::ScalarType type) { return host_empty({numel}, type, /*zeroed=*/true); };
      const auto moments = s_.bf16_moments ? at::kBFloat16 : at::kFloat;
      if (nvme) {
        // The initial state goes to the file; the tensors here are views of its buffers
        // while a sub-group is acquired.
        const auto initial = master_is_shard ? at::Tensor() : shard_values(g);
        g.master = master_is_shard ? engine_view(layers[g.layer].shard()) : at::Tensor();
        g.exp_avg = g.exp_avg_sq = at::Tensor();
        const auto state = acquire_state(g, /*load=*/false);
        if (!master_is_shard) state.master.copy_(initial);
        state.exp_avg.zero_();
        state.exp_avg_sq.zero_();
        release_state(g, /*dirty=*/true);
      } else {
        g.master = master_is_shard ? engine_view(layers[g.layer].shard()) : place(shard_values(g), at::kFloat);
        g.exp_avg = zeroed(moments);
        g.exp_avg_sq = zeroed(moments);
      }
      g.grad = layers[g.layer].host_grad().narrow(0, g.begin - layers[g.layer].gradient_split(), g.end - g.begin);
      if (bf16_) {
        g.bf16 = shares_engine_memory_ ? engine_view(layers[g.layer].shard())
                                       : host_empty(g.master.sizes(), at::kBFloat16);
      }
    } else {
      g.master = master_is_shard ? engine_view(layers[g.layer].shard())
                                 : shard_values(g).to(device, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
      g.exp_avg = at::zeros({numel}, at::TensorOptions().dtype(at::kFloat).device(device));
      g.exp_avg_sq = at::zeros({numel}, at::TensorOptions().dtype(at::kFloat).device(device));
    }
  }
  cpu_groups_ = cpu_sub_groups();
  if (nvme_) nvme_->flush();
  worker_ = std::thread([this] {
    if (!s_.cpus.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(s_.cpus.front(), &set);
      pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    pthread_setname_np(pthread_self(), "so-speculation");
    {
      std::lock_guard lock(mutex_);
      worker_tid_ = ::gettid();
    }
    idle_.notify_all();
    worker_loop();
  });
}

std::vector<pid_t> OffloadOptimizer::thread_ids() {
  auto tids = pool_.thread_ids();
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return worker_tid_ != 0; });
  tids.insert(tids.begin(), worker_tid_);
  return tids;
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
                                                               "clipping is certain or predicted)";
  text << mode
       << ", " << cpu_sub_groups() << " of " << sub_groups() << " sub-groups on the CPU (ratio " << s_.ratio << "), SIMD "
       << adamw_target() << ", " << pool_.size() << " thread(s)" << (s_.bf16_moments ? ", bf16 moments" : "");
  if (nvme_) {
    text << ", state on NVMe in " << nvme_->path().string() << " through " << nvme_->buffer_count() << " buffers of "
         << nvme_->buffer_bytes() / 1e6 << " MB";
  }
  return text.str();
}

ShardState OffloadOptimizer::export_layer(size_t layer) const {
  const auto& groups = groups_of_layer_[layer];  // none where the shard is empty
  int64_t steps = -1;
  auto count_steps = [&](const SubGroup& g) {
    SO_CHECK(steps < 0 || steps == g.steps, "sub-groups of layer " << layer << " disagree on their step count");
    steps = g.steps;
  };
  if (!groups.empty() && !export_copies(groups.size(), groups_[groups[0]].on_cpu, groups_[groups[0]].region >= 0,
                                        s_.bf16_moments)) {
    // The whole layer in one host sub-group in fp32: its own tensors, no copy.
    const auto& g = groups_[groups[0]];
    count_steps(g);
    return {g.master, g.exp_avg, g.exp_avg_sq, std::max<int64_t>(steps, 0)};
  }
  // Otherwise one fp32 host tensor each for the layer, each sub-group copied into its part:
  // from the NVMe tier's buffers (reused once released), widened from bf16 moments (exactly),
  // or from the device. (Copies of each sub-group joined with at::cat afterwards held the
  // layer's state twice, the transient of every checkpoint save.)
  const int64_t numel = engine_.layers()[layer].shard_numel();  // the sub-groups tile it
  const auto fp32 = at::TensorOptions().dtype(at::kFloat);
  ShardState out{at::empty({numel}, fp32), at::empty({numel}, fp32), at::empty({numel}, fp32), 0, /*copied=*/true};
  for (size_t i : groups) {
    const auto& g = groups_[i];
    const auto state = acquire_state(g);
    const int64_t length = g.end - g.begin;
    out.master.narrow(0, g.begin, length).copy_(state.master);
    out.exp_avg.narrow(0, g.begin, length).copy_(state.exp_avg);  // bf16 moments widen exactly
    out.exp_avg_sq.narrow(0, g.begin, length).copy_(state.exp_avg_sq);
    release_state(g, /*dirty=*/false);
    count_steps(g);
  }
  out.steps = std::max<int64_t>(steps, 0);
  return out;
}

void OffloadOptimizer::import_layer(size_t layer, const ShardState& state) {
  wait_for_worker();
  for (size_t i : groups_of_layer_[layer]) {
    const auto& g = groups_[i];
    const int64_t length = g.end - g.begin;
    // Every element of the NVMe region is overwritten: nothing to read from the drive.
    const auto mine = acquire_state(g, /*load=*/false);
    mine.master.copy_(state.master.narrow(0, g.begin, length));
    mine.exp_avg.copy_(state.exp_avg.narrow(0, g.begin, length));  // to bf16 moments: nearest-even
    mine.exp_avg_sq.copy_(state.exp_avg_sq.narrow(0, g.begin, length));
    release_state(g, /*dirty=*/true);
  }
  set_shard_from_master(layer, state.master);
  finish_import(layer, state.steps);
}

void OffloadOptimizer::import_field(size_t layer, StateField field, const at::Tensor& values) {
  SO_CHECK(!nvme_, "the NVMe tier imports whole layers (import_layer)");
  wait_for_worker();
  for (size_t i : groups_of_layer_[layer]) {
    const auto& g = groups_[i];
    const auto& mine = field == StateField::master ? g.master : field == StateField::exp_avg ? g.exp_avg : g.exp_avg_sq;
    mine.copy_(values.narrow(0, g.begin, g.end - g.begin));  // to bf16 moments: nearest-even
  }
  if (field == StateField::master) set_shard_from_master(layer, values);
}

void OffloadOptimizer::set_shard_from_master(size_t layer, const at::Tensor& master) {
  // The compute-dtype shard from the fp32 master, rounded as the CPU kernel's bf16 copy is;
  // where the master is the shard (fp32 on the CPU) the copies wrote it already, and a second
  // copy of it was 4 bytes a parameter written for nothing.
  auto& engine_layer = engine_.layers()[layer];
  engine_layer.set_shard(master_is_shard_ ? engine_layer.shard() : master.to(engine_layer.device()));
}

void OffloadOptimizer::finish_import(size_t layer, int64_t steps) {
  for (size_t i : groups_of_layer_[layer]) {
    groups_[i].steps = steps;
    groups_[i].speculated = false;
  }
}

void OffloadOptimizer::begin_step(double lr) {
  wait_for_worker();
  lr_ = lr;
  times_ = {};
  layer_s_.assign(engine_.layers().size(), 0.0);
  backward_end_ = 0;
  for (auto& g : groups_) {
    g.speculated = false;
    g.finished_at = 0;
  }
  local_squared_norm_ = 0;
  summed_groups_ = 0;
  stopped_ = Stop::none;
}

OffloadOptimizer::Stop OffloadOptimizer::stop_for(double local_squared_norm) const {
  if (!std::isfinite(local_squared_norm)) return Stop::non_finite;
  const double clip = s_.adamw.gradient_clipping;
  if (s_.speculation == Speculation::always || clip <= 0) return Stop::none;
  // This rank's norm so far is ≤ the global norm: beyond the threshold clipping is certain.
  const double bound = std::sqrt(local_squared_norm);
  if (bound > clip) return Stop::certain;
  if (last_clipped_ && !recent_shares_.empty() && bound > clip * median(recent_shares_)) return Stop::predicted;
  return Stop::none;
}

void OffloadOptimizer::learn(const StepOutcome& outcome) {
  if (s_.speculation != Speculation::automatic || s_.adamw.gradient_clipping <= 0) return;
  if (outcome.skipped || !(outcome.grad_norm > 0) || !std::isfinite(local_squared_norm_)) return;
  recent_shares_.push_back(std::sqrt(local_squared_norm_) / outcome.grad_norm);
  if (recent_shares_.size() > kShareHistory) recent_shares_.pop_front();
  last_clipped_ = outcome.clipped;
}

std::string OffloadOptimizer::export_rank_state() const {
  if (s_.speculation != Speculation::automatic) return {};
  nlohmann::json state = {{"speculation", {{"last_clipped", last_clipped_},
                                           {"recent_shares", std::vector<double>(recent_shares_.begin(), recent_shares_.end())}}}};
  return state.dump();  // doubles print with 17 digits: they read back exactly
}

void OffloadOptimizer::import_rank_state(const std::string& json) {
  recent_shares_.clear();
  last_clipped_ = false;
  if (json.empty()) return;  // a checkpoint of another mode, or from before the history was kept
  const auto state = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  SO_CHECK(!state.is_discarded(), "the optimizer state in the checkpoint is not JSON: " << json.substr(0, 200));
  const auto* speculation = state.is_object() && state.contains("speculation") ? &state["speculation"] : nullptr;
  if (!speculation || !speculation->is_object()) return;
  const auto last = speculation->value("last_clipped", nlohmann::json());
  const auto shares = speculation->value("recent_shares", nlohmann::json());
  SO_CHECK(last.is_boolean() && shares.is_array() && shares.size() <= kShareHistory,
           "the optimizer state in the checkpoint is malformed: " << json.substr(0, 200));
  for (const auto& share : shares) {
    SO_CHECK(share.is_number() && std::isfinite(share.get<double>()) && share.get<double>() >= 0,
             "the optimizer state in the checkpoint holds a bad share of the gradient norm: " << share.dump());
    recent_shares_.push_back(share.get<double>());
  }
  last_clipped_ = last.get<bool>();
}

void OffloadOptimizer::gradient_ready(size_t layer) {
  // The engine reduced the CPU sub-groups' gradients into their host buffers (g.grad) already.
  std::vector<size_t> queued;
  for (size_t i : groups_of_layer_[layer]) {
    if (groups_[i].on_cpu) queued.push_back(i);
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
      // auto goes on adding up the norm once it stopped: the share it learns from is this rank's
      // whole CPU-gradient norm (the worker has nothing else to do until step end).
      auto& g = groups_[index];
      const bool learning = s_.speculation == Speculation::automatic && s_.adamw.gradient_clipping > 0;
      if ((stopped_ == Stop::none || learning) && std::isfinite(local_squared_norm_)) {
        local_squared_norm_ += squared_norm(pool_, g.grad.data_ptr<float>(), static_cast<size_t>(g.grad.numel()));
        ++summed_groups_;
      }
      if (stopped_ == Stop::none) stopped_ = stop_for(local_squared_norm_);
      if (stopped_ == Stop::none) {
        std::vector<size_t> upcoming;  // what the NVMe tier reads ahead: the next queued sub-groups
        if (nvme_) {
          std::lock_guard lock(mutex_);
          upcoming.assign(queue_.begin(),
                          queue_.begin() + static_cast<std::ptrdiff_t>(std::min(queue_.size(), nvme_->buffer_count())));
        }
        ++g.steps;
        step_cpu(g, AdamWPass::step, 1.0f, upcoming);
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

OffloadOptimizer::StateTensors OffloadOptimizer::acquire_state(const SubGroup& g, bool load) const {
  if (g.region < 0) return {g.master, g.exp_avg, g.exp_avg_sq};
  const int64_t n = g.end - g.begin;
  char* buffer = nvme_->acquire(static_cast<size_t>(g.region), load);
  const auto moments = s_.bf16_moments ? at::kBFloat16 : at::kFloat;
  const uint64_t moment_bytes = static_cast<uint64_t>(n) * (s_.bf16_moments ? 2 : 4);
  StateTensors state;
  uint64_t at = 0;
  if (master_is_shard_) {
    state.master = g.master;
  } else {
    state.master = at::from_blob(buffer, {n}, at::kFloat);
    at = aligned(static_cast<uint64_t>(n) * 4);
  }
  state.exp_avg = at::from_blob(buffer + at, {n}, moments);
  state.exp_avg_sq = at::from_blob(buffer + at + aligned(moment_bytes), {n}, moments);
  return state;
}

void OffloadOptimizer::release_state(const SubGroup& g, bool dirty) const {
  if (g.region >= 0) nvme_->release(static_cast<size_t>(g.region), dirty);
}

void OffloadOptimizer::prefetch(const std::vector<size_t>& upcoming) const {
  if (!nvme_) return;
  for (size_t i : upcoming) {
    if (groups_[i].region >= 0) nvme_->prefetch(static_cast<size_t>(groups_[i].region));
  }
}

void OffloadOptimizer::step_cpu(SubGroup& g, AdamWPass pass, float grad_scale, const std::vector<size_t>& upcoming) {
  const double start = now_s();
  const auto state = acquire_state(g);
  prefetch(upcoming);  // after the acquire, so that it cannot take this sub-group's buffer
  run_pass(g, state, pass, grad_scale);
  release_state(g, /*dirty=*/true);
  layer_s_[g.layer] += now_s() - start;
}

void OffloadOptimizer::run_pass(SubGroup& g, const StateTensors& state, AdamWPass pass, float grad_scale) {
  const size_t index = static_cast<size_t>(&g - groups_.data());
  float* p = state.master.data_ptr<float>();
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
        adamw_pass(pass, step, p + o, bf16_bits(state.exp_avg) + o, bf16_bits(state.exp_avg_sq) + o, grad + o, bf16_copy,
                   e - b, rounding(index, static_cast<int64_t>(o)));
      } else {
        adamw_pass(pass, step, p + o, state.exp_avg.data_ptr<float>() + o, state.exp_avg_sq.data_ptr<float>() + o,
                   grad + o, bf16_copy, e - b);
      }
    });
  }
}

void OffloadOptimizer::step_device(SubGroup& g, double grad_scale) {
  ScopedTime timed(layer_s_[g.layer]);
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
    // Each sub-group straight into its place in the layer's shard, converted to the compute
    // dtype by the copy; what was stepped in place (a CPU run's fp32 master is the shard) is not
    // copied. (On a GPU, copies of the sub-groups and their concatenation, then copied into
    // the shard, held up to two more of the layer on the device at once: 12 MB over the plan
    // for the tiny model on an H200, 0.9 GB for an 8B layer.)
    auto shard = layers[l].shard();
    for (size_t i : groups_of_layer_[l]) {
      const auto& g = groups_[i];
      auto target = shard.narrow(0, g.begin, g.end - g.begin);
      if (!shares_engine_memory_ && g.on_cpu && !bf16_ && g.region >= 0) {
        // A GPU run's fp32 weights from the NVMe tier: read back (a CPU run's master is the
        // shard, in place).
        const auto state = acquire_state(g);
        target.copy_(state.master);  // synchronous: the buffer is reused
        release_state(g, /*dirty=*/false);
        continue;
      }
      // A GPU run's CPU kernel already wrote the bf16 copy: the link carries the narrow type.
      // From pinned memory the copy is asynchronous, queued on the compute stream before the
      // next forward (which is on the same stream), so it needs no host synchronisation.
      const auto& source = g.on_cpu && bf16_ ? g.bf16 : g.master;
      if (source.data_ptr() != target.data_ptr()) target.copy_(source, /*non_blocking=*/source.is_pinned());
    }
    layers[l].shard_updated();
  }
}

StepOutcome OffloadOptimizer::finish_step() {
  StepOutcome outcome;
  backward_end_ = now_s();
  {
    ScopedTime timed(times_.wait_s);
    const zero::TraceScope traced("superoffload/optimizer wait for speculation");
    wait_for_worker();  // it may still be stepping on the pool that the norm below uses
  }
  // Global norm and non-finite flag from the reduced gradients (one all-reduce).
  {
    ScopedTime timed(times_.norm_s);
    // The CPU share's part on the pool. When the worker summed every CPU sub-group's gradient
    // during backward (speculation on, all finite), that sum is the part: 28% of an 8B step
    // (0.7-1.0 s on an H200's 16-core host) is not spent reading 27 GB of gradients again.
    outcome.grad_norm = engine_.global_grad_norm([this] {
      if (summed_groups_ == cpu_groups_ && std::isfinite(local_squared_norm_)) return local_squared_norm_;
      double squares = 0;
      for (const auto& g : groups_) {
        if (g.on_cpu) squares += squared_norm(pool_, g.grad.data_ptr<float>(), static_cast<size_t>(g.grad.numel()));
      }
      return squares;
    });
  }
  const bool finite = std::isfinite(outcome.grad_norm);
  const double coefficient = clip_coefficient(s_.adamw.gradient_clipping, outcome.grad_norm);
  outcome.clipped = finite && coefficient < 1.0;
  outcome.skipped = !finite;
  for (const auto& g : groups_) {
    if (g.speculated && g.finished_at > 0 && g.finished_at < backward_end_) ++outcome.speculated_before_backward_end;
  }
  outcome.speculation.predicted_stops = stopped_ == Stop::predicted ? 1 : 0;
  outcome.speculation.mispredicted_stops = stopped_ == Stop::predicted && finite && !outcome.clipped ? 1 : 0;
  learn(outcome);
  const float scale = outcome.clipped ? static_cast<float>(coefficient) : 1.0f;
  auto& counts = outcome.speculation;
  // The CPU passes left, in order: the speculated sub-groups' undo or redo, then the late
  // steps. The NVMe tier reads each one's state ahead while the one before is stepped.
  std::vector<size_t> passes;
  if (outcome.skipped || outcome.clipped) {
    for (size_t i = 0; i < groups_.size(); ++i) {
      if (groups_[i].speculated) passes.push_back(i);
    }
  }
  const size_t rollbacks = passes.size();
  if (!outcome.skipped) {
    for (size_t i = 0; i < groups_.size(); ++i) {
      if (groups_[i].on_cpu && !groups_[i].speculated) passes.push_back(i);
    }
  }
  auto after = [&](size_t k) {  // the sub-groups the NVMe tier reads ahead while passes[k] is stepped
    if (!nvme_) return std::vector<size_t>{};
    const size_t end = std::min(passes.size(), k + 1 + nvme_->buffer_count());
    return std::vector<size_t>(passes.begin() + static_cast<std::ptrdiff_t>(k + 1),
                               passes.begin() + static_cast<std::ptrdiff_t>(std::max(end, k + 1)));
  };
  for (const auto& g : groups_) counts.speculated += g.speculated ? 1 : 0;
  {
    ScopedTime timed(times_.rollback_s);
    const zero::TraceScope traced("superoffload/optimizer rollback");
    if (!outcome.skipped && !outcome.clipped) counts.committed = counts.speculated;
    for (size_t k = 0; k < rollbacks; ++k) {
      auto& g = groups_[passes[k]];
      if (outcome.skipped) {  // nothing is stepped: back to the weights of the last good step
        step_cpu(g, AdamWPass::undo, 1.0f, after(k));
        --g.steps;
        ++counts.undone;
      } else {
        step_cpu(g, AdamWPass::redo, scale, after(k));
        ++counts.replayed;
      }
    }
  }
  if (outcome.skipped) return outcome;
  {
    const double late_start = now_s();
    ScopedTime timed(times_.cpu_step_s);
    const zero::TraceScope traced("superoffload/optimizer late steps");
    for (size_t k = rollbacks; k < passes.size(); ++k) {
      auto& g = groups_[passes[k]];
      ++g.steps;
      step_cpu(g, AdamWPass::step, scale, after(k));
      ++counts.late;
    }
    times_.cpu_late_s = now_s() - late_start;
  }
  {
    ScopedTime timed(times_.device_step_s);
    const zero::TraceScope traced("superoffload/optimizer device step");
    for (auto& g : groups_) {
      if (!g.on_cpu) step_device(g, outcome.clipped ? coefficient : 1.0);
    }
  }
  {
    const zero::TraceScope traced("superoffload/optimizer upload");
    upload();
  }
  return outcome;
}

}  // namespace superoffload::optim
