// What a run needs in memory before it allocates anything, from the model's config.json and
// the configuration: per rank on the device (parameter shards, the device share's fp32
// gradient shard, gathered layers, reduce-scatter buckets, saved activations and the
// recompute of one layer, loss logits, the device share of the optimizer, the runtime's
// workspaces) and on the host (fp32 master weights, Adam moments, gradient and bf16 staging of
// the CPU share, pinned). `train` refuses a run that cannot fit at start-up (host memory, and
// on a GPU the device's free memory); `superoffload plan` prints the same estimate for a
// cluster shape the user does not have yet.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace superoffload::train {

struct ModelSize {
  std::string architecture;
  int64_t parameters = 0;         // all
  int64_t active_parameters = 0;  // per token (MoE: routed top-k)
  int64_t largest_layer = 0;      // parameters of the largest layer (embedding, block or head)
  int64_t layers = 0, hidden = 0, intermediate = 0, vocab = 0;
  int64_t kv_width = 0;  // num_key_value_heads x head_dim: a token's keys (and values) per layer
  // The layers apart: embedding, head, one decoder block, and of a MoE block its experts'
  // parameters (all experts; 0 for dense models) and how many a token uses.
  int64_t embedding_parameters = 0, head_parameters = 0, block_parameters = 0;
  int64_t block_expert_parameters = 0, experts = 0, top_k = 0;
};

// Parameter counts of a decoder (Llama-like, MoE or GPT-2) from its HF config.json.
ModelSize model_size_from_config(const std::string& model_dir);

struct MemoryPlan {
  int ranks = 1;
  bool on_gpu = true;
  // Per rank, on the device: every buffer the engine and optimizer allocate there.
  double device_parameter_bytes = 0;   // this rank's parameter shards (compute dtype)
  double device_gradient_bytes = 0;    // fp32 gradient shard of the device share only (the CPU
                                       // share's gradient is reduced into host memory)
  double device_gathered_bytes = 0;    // the running layer and the prefetched one
  double device_reduce_bytes = 0;      // one layer's parameter gradients (compute dtype) and the
                                       // reduce-scatter buckets in flight (two, fp32)
  double device_activation_bytes = 0;  // saved layer inputs (or every intermediate without
                                       // checkpointing) and one layer's recompute working set
  double device_logits_bytes = 0;      // the loss chunk's fp32 log-softmax and gradients (backward's peak)
  double device_optimizer_bytes = 0;   // the device share's fp32 master and moments
  double device_workspace_bytes = 0;   // through LibTorch's allocator besides: cuBLAS's workspace
                                       // and the gradient norm's fp64 slices
  double device_runtime_bytes = 0;     // CUDA context and NCCL's buffers (estimate;
                                       // already in use when train checks free memory)
  double host_optimizer_bytes = 0, host_setup_bytes = 0;
  // [model] activation_offload = "host": every layer's checkpointed input, pinned; each
  // micro-batch copies it out in forward and back in backward (2 × these bytes over the link).
  double host_activation_bytes = 0;
  int64_t mlp_tile_tokens = 0;  // [model] tile_tokens as resolved (mlp_tile_tokens below); 0: untiled
  // [parallel] sequence_parallel_size, and the tokens of a micro-batch one rank holds (its
  // shard of each row): every activation term above counts these.
  int64_t sequence_parallel = 1;
  double rank_tokens = 0;
  // [moe] expert_parallel_size as it applies (1 for dense models), and what a rank moves per
  // micro-batch: parameters all-gathered (forward, and backward's recompute; with and without
  // expert parallelism) and routed hidden states sent to other ranks by all-to-all (there and
  // back, in forward, recompute and backward).
  int64_t expert_parallel = 1;
  double gathered_bytes_per_micro_batch = 0, gathered_bytes_without_expert_parallel = 0;
  double largest_layer_bytes = 0, largest_layer_bytes_without_expert_parallel = 0;  // as a rank computes it, compute dtype
  double all_to_all_bytes_per_micro_batch = 0;
  // The process before the run allocates: LibTorch, MPI, HDF5 and the other libraries as they
  // are resident (measured in this process, which has them loaded), plus on GPU runs an
  // estimate of the CUDA runtime's host memory. For the tiny model it is most of the total.
  double host_runtime_bytes = 0;
  // [offload] device = "nvme": the CPU share's master and moments, in the rank's file under
  // nvme_path (host_optimizer_bytes then holds the gradient copies and the buffer ring).
  double nvme_bytes = 0;
  double device_total() const {
    return device_parameter_bytes + device_gradient_bytes + device_gathered_bytes + device_reduce_bytes +
           device_activation_bytes + device_logits_bytes + device_optimizer_bytes + device_workspace_bytes +
           device_runtime_bytes;
  }
  double host_total() const { return host_optimizer_bytes + host_setup_bytes + host_activation_bytes + host_runtime_bytes; }
};

// `resumes`: the run starts from a checkpoint (train's --resume, or [checkpoint] auto_resume with
// one there), which it reads layer by layer into a buffer of the largest shard's master and
// moments. Counted by every run that saves anyway; it matters only to one that saves nothing.
MemoryPlan plan_memory(const ModelSize& model, const config::Config& config, int ranks, bool on_gpu,
                       bool resumes = false);

// The longest [data] seq_len, in steps of `granularity` tokens (rounded up to a multiple of
// sequence_parallel_size), whose plan fits the device (when on_gpu and a capacity is given) and
// the node's host memory (when given), with kPlanHeadroom, all else as `config` sets it
// (MLP tiles chosen anew for each length when tile_tokens = 0). 0: not even one step fits.
int64_t longest_sequence(const ModelSize& model, config::Config config, int ranks, int ranks_per_node, bool on_gpu,
                         double device_capacity_bytes, double host_capacity_per_node_bytes, int64_t granularity = 1024);

// The MLP tile ([model] tile_tokens) a run of this configuration uses, in tokens of a
// micro-batch; 0: untiled. Chosen (tile_tokens = 0): tiles of hidden_size tokens, ALST's rule,
// once a micro-batch holds kTileFromTokens or more — below that the untiled intermediate is a
// few hundred MB and the recompute a tile costs would be paid for nothing.
constexpr int64_t kTileFromTokens = 32768;
int64_t mlp_tile_tokens(const config::Config& config, int64_t hidden);

// The estimate as a table (per GPU/rank and per node), and, with capacities > 0, whether it fits.
std::vector<std::string> describe_plan(const ModelSize& model, const MemoryPlan& plan, int ranks_per_node,
                                       double device_capacity_bytes, double host_capacity_per_node_bytes);

// The share of a capacity a plan may fill: the rest is headroom for fragmentation and what the
// estimate leaves out.
constexpr double kPlanHeadroom = 0.95;

// Host link bandwidths, one way, for the activation offload's copy time: a GH200's NVLink-C2C
// (450 GB/s per direction) and a PCIe 5.0 x16 slot (64 GB/s).
constexpr double kNvlinkC2cBytesPerSecond = 450e9;
constexpr double kPcie5BytesPerSecond = 64e9;

// Why a run cannot start on a GPU with `free_bytes` free of `total_bytes` (the runtime's share
// of the plan is in use already), and what would make it fit: more GPUs, a higher [offload]
// ratio, a smaller micro-batch, activation checkpointing. nullopt: it fits.
struct DeviceRefusal {
  std::string message, fix;
};
std::optional<DeviceRefusal> refuse_device_memory(const ModelSize& model, const config::Config& config, int ranks,
                                                  const std::string& device, double free_bytes, double total_bytes);

// What this process holds resident the first time it is asked (before a run allocates): the
// program and its libraries, after a first use of LibTorch's host kernels (their lazy set-up
// stays resident). Measured once, from /proc/self/statm.
double process_baseline_bytes();
// Resident memory no buffer of the program accounts for: glibc's free lists inside the heap after
// a step's transients are freed (mallinfo2 at the end of the tiny model's first step: 70-79 MB
// free inside a 234 MB heap, much of it resident) and LibTorch's GEMM packing scratch (11 MB in
// the tiny model's eval). Measured, not derived: the tiny model's peak RSS at 1 rank settles
// 35-45 MiB above the plan's other terms, the 125M's at 8 ranks 0-15 MiB above them (Sapphire
// Rapids, glibc 2.36; tests/cli/test_memory_plan_rss.sh). It is not malloc's per-thread arenas
// (MALLOC_ARENA_MAX=1 changes nothing), and MALLOC_MMAP_THRESHOLD_=256 KiB or 1 MiB and
// MALLOC_TRIM_THRESHOLD_=1 MiB leave it as it is (602-622 MiB peaks either way), so no malloc
// policy is set. Negligible beyond the smallest models; `train` and `eval` count it.
constexpr double kAllocatorSlackBytes = 40.0 * 1024 * 1024;
// The CUDA runtime's host memory per GPU rank (context, pinned staging, the libraries' data):
// an estimate, not yet measured on a GPU node.
constexpr double kCudaHostRuntimeBytes = 1024.0 * 1024 * 1024;

// Bytes of memory this node can give the job (MemAvailable).
double available_host_bytes();

}  // namespace superoffload::train
