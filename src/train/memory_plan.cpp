// Memory plan.
#include "train/memory_plan.hpp"

#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.hpp"
#include "model/hf_config.hpp"
#include "optim/offload_optimizer.hpp"
#include "zero/gradient_reducer.hpp"

namespace superoffload::train {

namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return text;
}

}  // namespace

ModelSize model_size_from_config(const std::string& model_dir) {
  // Typed access (errors name the file, key and value) and arithmetic in double: the sizes are
  // not yet validated by a plugin here, and products of large ones overflow int64.
  const auto c = model::HfConfig::load(model_dir + "/config.json");
  auto size = [&](const char* key, double fallback) {
    return c.has(key) ? static_cast<double>(c.dimension(key)) : fallback;
  };
  ModelSize m;
  m.architecture = c.architecture().empty() ? "?" : c.architecture();
  const bool gpt2 = c.string("model_type", "") == "gpt2";
  // Required (dimension() names a missing key); GPT-2 configs may rely on HF's defaults.
  const double h = gpt2 ? size("n_embd", 768) : static_cast<double>(c.dimension("hidden_size"));
  const double layers = gpt2 ? size("n_layer", 12) : static_cast<double>(c.dimension("num_hidden_layers"));
  const double vocab = static_cast<double>(c.dimension("vocab_size"));
  const double heads = gpt2 ? size("n_head", 12) : size("num_attention_heads", 1);
  const double kv_heads = size("num_key_value_heads", heads);
  const double head_dim = size("head_dim", std::max(1.0, std::floor(h / heads)));
  const double intermediate = gpt2 ? size("n_inner", 4 * h) : size("intermediate_size", 4 * h);
  const double attention = h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h;
  // MoE: experts of moe_intermediate_size (Qwen3-MoE) or intermediate_size (Mixtral, GPT-OSS).
  // Dense configs of MoE families carry num_experts = 0.
  auto count = [&](const char* key) {
    const int64_t value = c.integer(key, 0);
    if (value < 0) c.invalid(key, "= " + std::to_string(value) + " must be >= 0");
    return static_cast<double>(value);
  };
  const double experts = std::max(count("num_experts"), count("num_local_experts"));
  const double top_k = c.has("num_experts_per_tok") ? size("num_experts_per_tok", 2) : size("experts_per_token", 2);
  const double expert_width = size("moe_intermediate_size", intermediate);
  const double mlp = gpt2 ? 2 * h * intermediate : 3 * h * intermediate;
  const double block_dense = attention + mlp + 2 * h;
  const double block_moe = attention + experts * 3 * h * expert_width + h * experts + 2 * h;
  const double block_moe_active = attention + top_k * 3 * h * expert_width + h * experts + 2 * h;
  const double block = experts > 0 ? block_moe : block_dense;
  const double embedding = vocab * h + (gpt2 ? size("n_positions", 1024) * h : 0);
  const double head = (c.boolean("tie_word_embeddings", gpt2) ? 0 : vocab * h) + h;
  const double parameters = embedding + layers * block + head;
  // 2^50 parameters (4 PiB in fp32) is past any machine; it also keeps the counts in int64.
  constexpr double kBuildable = 1125899906842624.0;
  if (parameters > kBuildable) {
    std::ostringstream text;
    text.precision(3);
    text << c.path() << " describes a model of " << parameters << " parameters (hidden_size " << h << ", "
         << layers << " layers, vocabulary " << vocab << ", intermediate " << intermediate
         << "): it cannot be built on any machine";
    throw Error(text.str(), "check the sizes in config.json", Error::UserInput{});
  }
  m.hidden = static_cast<int64_t>(h);
  m.layers = static_cast<int64_t>(layers);
  m.vocab = static_cast<int64_t>(vocab);
  m.intermediate = static_cast<int64_t>(intermediate);
  m.kv_width = static_cast<int64_t>(kv_heads * head_dim);
  m.parameters = static_cast<int64_t>(parameters);
  m.active_parameters = static_cast<int64_t>(experts > 0 ? embedding + layers * block_moe_active + head : parameters);
  m.largest_layer = static_cast<int64_t>(std::max({embedding, block, head}));
  m.embedding_parameters = static_cast<int64_t>(embedding);
  m.head_parameters = static_cast<int64_t>(head);
  m.block_parameters = static_cast<int64_t>(block);
  m.block_expert_parameters = static_cast<int64_t>(experts > 0 ? experts * 3 * h * expert_width : 0);
  m.experts = static_cast<int64_t>(experts);
  m.top_k = static_cast<int64_t>(experts > 0 ? top_k : 0);
  return m;
}

MemoryPlan plan_memory(const ModelSize& m, const config::Config& cfg, int ranks, bool on_gpu, bool resumes) {
  MemoryPlan p;
  p.ranks = ranks;
  p.on_gpu = on_gpu;
  const double n = static_cast<double>(m.parameters) / ranks;
  // Expert parallelism (zero/expert_parallel.hpp) leaves each rank's shard as it is (its experts
  // over fewer ranks) but gathers a MoE block with its own experts only.
  const int64_t ep = cfg.moe.expert_parallel_size;
  p.expert_parallel = m.experts > 0 && ep > 1 && m.experts % ep == 0 && ranks % ep == 0 ? ep : 1;
  // A block as a rank computes it: shared parameters and its own experts.
  const double experts_all = static_cast<double>(m.block_expert_parameters);
  const double block_computed =
      static_cast<double>(m.block_parameters) - experts_all * (1.0 - 1.0 / static_cast<double>(p.expert_parallel));
  const double largest = static_cast<double>(m.largest_layer);  // as set-up materialises it
  const double largest_computed = m.block_parameters > 0 ? std::max({static_cast<double>(m.embedding_parameters),
                                                                     static_cast<double>(m.head_parameters),
                                                                     block_computed})
                                                         : largest;
  // What is gathered into buffers: a region partitioned over one rank runs on views of its shard
  // (zero::LayerRegion::in_place) — every layer at 1 rank, a layer's experts when each has no
  // replica (world = expert_parallel_size).
  const bool shared_gathered = ranks > 1, experts_gathered = ranks / p.expert_parallel > 1;
  const double block_gathered = (shared_gathered ? static_cast<double>(m.block_parameters) - experts_all : 0.0) +
                                (experts_gathered ? experts_all / static_cast<double>(p.expert_parallel) : 0.0);
  const double largest_gathered =
      !shared_gathered ? block_gathered
      : m.block_parameters > 0 ? std::max({static_cast<double>(m.embedding_parameters),
                                           static_cast<double>(m.head_parameters), block_gathered})
                               : largest;
  const double compute_bytes = cfg.precision.bf16 ? 2 : 4;
  p.largest_layer_bytes = compute_bytes * largest_computed;
  p.largest_layer_bytes_without_expert_parallel = compute_bytes * largest;
  const bool nvme = cfg.offload.device == config::OffloadDevice::nvme;
  const bool offloaded = cfg.offload.device == config::OffloadDevice::cpu || nvme;
  const double cpu_share = offloaded ? cfg.offload.ratio : 0.0;
  p.device_parameter_bytes = compute_bytes * n;
  p.device_gradient_bytes = 4 * n * (1 - cpu_share);
  // Gathered: the running layer plus what prefetch may hold, within stage3_max_live_parameters.
  // A layer larger than stage3_prefetch_bucket_size is not gathered ahead (zero/engine.cpp's
  // prefetch): beside the running layer, at most one of that size.
  const double prefetched = std::min(largest_gathered, static_cast<double>(cfg.zero.stage3_prefetch_bucket_size));
  const double live =
      std::min<double>(static_cast<double>(cfg.zero.stage3_max_live_parameters), largest_gathered + prefetched);
  p.device_gathered_bytes = compute_bytes * std::max<double>(live, largest_gathered);  // 0 at 1 rank
  // Backward of a layer leaves its parameters' gradients (compute dtype); the reducer keeps at
  // most two chunks of fp32 send buffers (a bucket each) and staging buffers (a bucket / ranks
  // each) in flight (zero/gradient_reducer.hpp).
  // One rank reduces the device share in place: only the CPU share's staging is in flight, in
  // chunks of at most 2^25 elements.
  const double total = static_cast<double>(m.parameters);
  const double bucket = static_cast<double>(cfg.zero.reduce_bucket_size);
  // A chunk never spans layers: at most a layer's gradient (every rank's slice of it) when the
  // bucket is larger than the layer.
  const double chunk = std::min(bucket, largest);
  const double in_flight = ranks > 1 ? std::min(2 * chunk * (1 + 1.0 / ranks), total)
                                     : std::min(2 * std::min(bucket, static_cast<double>(zero::GradientReducer::kOneRankChunk)),
                                                total * cpu_share);
  // A MoE layer's experts' gradients are views of the one stacked gradient the grouped product
  // writes (model::stacked_weights; tests/unit/test_moe_grouped.cpp checks it): counted once, in
  // the layer's gradients.
  p.device_reduce_bytes = compute_bytes * largest_computed + 4 * in_flight;
  const double micro = static_cast<double>(std::max<int64_t>(1, cfg.training.train_micro_batch_size_per_gpu));
  // A rank's tokens: under sequence parallelism its shard of each row. Attention's exchange
  // turns them into the whole row for 1/P of the heads, the same bytes, within the working set.
  p.sequence_parallel = std::max<int64_t>(1, cfg.parallel.sequence_parallel_size);
  const double tokens = micro * static_cast<double>(cfg.data.seq_len) / static_cast<double>(p.sequence_parallel);
  p.rank_tokens = tokens;
  const double h = static_cast<double>(m.hidden), i = static_cast<double>(m.intermediate);
  // Per token, in elements of the compute dtype: h the hidden size, kv the keys' (and values')
  // width (num_key_value_heads x head_dim), i the MLP's intermediate size. Counted allocation by
  // allocation on the CPU (tests/zero/activation_memory.cpp, which holds the plan within
  // -5%..+25% of the engine's peak for several widths, with and without checkpointing, offload
  // and tiles):
  //  - without checkpointing, what forward keeps of a block: 9 h + 2 kv (norms' outputs, q and
  //    its rotation, attention's output, projections, residuals; k, v) and the MLP's 4 i (gate,
  //    up, SiLU(gate), their product) — 3 i on a GPU, whose SwiGLU kernel saves gate and up only;
  //  - with checkpointing, the block's input (1 h), and at backward's peak one block's recompute
  //    with the gradients in flight: 10 h + 2 kv, and 6 i (5 i on a GPU: gate, up and the three
  //    gradients); tiled, the tiles' outputs and their input's gradient are whole-row tensors
  //    besides, 1 h more;
  //  - without checkpointing, backward's gradients in flight: 2 i.
  // The MLP's intermediates exist for one tile at a time when tiled.
  // These were fitted at 3-4k tokens, where one MLP tile's intermediates weigh about two hidden
  // states; at a long row they weigh little and the old count showed what they had covered
  // (activation_memory --tokens 16384 --layers 2, fp32: tiled passes 11.6% over the plan). Two
  // fixes of 2026-11-29 took it away rather than the plan adding it: the engine lets go of a
  // block's recomputed output and the gradient coming into it before the block's backward
  // (zero/gradient_seed.hpp), and tiles write their outputs into one whole output instead of
  // joining them (model/blocks/token_tiles.cpp): at 16k tokens tiled +0.4%, untiled +2.2%. Then
  // the CPU's RMSNorm came to keep only its input, as the GPU's fused kernel does
  // (model/blocks/rms_norm.cpp; HF's chain kept the normalised tensor and, in bf16, fp32 copies of
  // its input, which this plan counted for CPU runs until then): the CPU's peaks fell one to three
  // hidden states per block. Now: at 16k tokens tiled +16.9%, untiled +10.4%; at 3-4k +7..+23%.
  // The terms are not lowered to the CPU's counts: the plan lay 2-6% under the H200's allocated
  // peaks of 2026-11-28, whose norm was the fused kernel already.
  const double kv = static_cast<double>(m.kv_width);
  const int64_t tile = mlp_tile_tokens(cfg, m.hidden);
  p.mlp_tile_tokens = tile;
  const double mlp_tokens = tile > 0 ? std::min<double>(tokens, static_cast<double>(tile)) : tokens;
  const bool checkpointing = cfg.training.activation_checkpointing;
  const double kept_mlp = on_gpu ? 3 : 4, backward_mlp = on_gpu ? 5 : 6;
  const double per_layer_saved =
      checkpointing ? tokens * h * compute_bytes
                    : tokens * (9 * h + 2 * kv + kept_mlp * i) * compute_bytes;
  const double working =
      checkpointing ? tokens * ((tile > 0 ? 11 : 10) * h + 2 * kv) * compute_bytes +
                          mlp_tokens * backward_mlp * i * compute_bytes
                    : mlp_tokens * 2 * i * compute_bytes;
  p.device_activation_bytes = per_layer_saved * static_cast<double>(m.layers) + working;
  if (cfg.model.activation_offload == config::ActivationOffload::host && cfg.training.activation_checkpointing) {
    // zero/activation_offload.hpp: every block's input in host memory; on the device the one
    // being copied out (forward), or the one taken and the one fetched ahead (backward).
    p.host_activation_bytes = per_layer_saved * static_cast<double>(m.layers);
    p.device_activation_bytes = 2 * per_layer_saved + working;
  }
  // What a rank moves per micro-batch: every layer gathered twice (forward; backward's recompute
  // and backward share one gather), and under expert parallelism each routed hidden state that
  // leaves the rank, there and back, in forward, recompute and backward.
  if (ranks > 1) {
    const double layers = static_cast<double>(m.layers);
    const double outer = static_cast<double>(m.embedding_parameters + m.head_parameters);
    p.gathered_bytes_per_micro_batch = 2 * compute_bytes * (outer + layers * block_gathered);
    p.gathered_bytes_without_expert_parallel =
        2 * compute_bytes * (outer + layers * static_cast<double>(m.block_parameters));
  }
  if (p.expert_parallel > 1) {
    const double leaving = 1.0 - 1.0 / static_cast<double>(p.expert_parallel);
    p.all_to_all_bytes_per_micro_batch = tokens * static_cast<double>(m.top_k) * h * compute_bytes * 2 * 3 *
                                         static_cast<double>(m.layers) * leaving;
  }
  // The head's loss chunk (zero::EngineOptions::loss_chunk_tokens, about that many tokens of the
  // micro-batch): at its peak, in backward, three fp32 [chunk, vocab] tensors — the log-softmax
  // saved by forward, the gradient coming into it and the one it returns (forward peaks lower:
  // the fp32 logits and their log-softmax).
  p.device_logits_bytes = 3 * 4 * std::min(tokens, 1024.0) * static_cast<double>(m.vocab);
  // The device share steps with fp32 master and moments on the device (12 bytes/parameter).
  p.device_optimizer_bytes = 12 * n * (1 - cpu_share);
  // Seen by LibTorch's allocator as well (an H200's tiny run peaked 40 MB over the terms
  // above): cuBLAS's workspace on the compute stream, LibTorch's default of 32 MiB on Hopper.
  // (The global gradient norm's fp64 copy and square of a slice of up to 2^24 elements, 256 MiB,
  // went with the multi-tensor norm of 2026-11-28: zero/engine.cpp.)
  p.device_workspace_bytes = 32.0 * 1024 * 1024;
  // CUDA context (~0.5 GiB), NCCL's buffers between ranks.
  p.device_runtime_bytes = (ranks > 1 ? 1.0 : 0.75) * 1024 * 1024 * 1024;
  // Host: master (4) + moments (8 in fp32, 4 in bf16), gradient (4) and bf16 staging (2)
  // of the CPU share. With the NVMe tier master and moments live in the file, and the host
  // holds buffer_count sub-groups' worth of them.
  // A CPU run's optimizer shares the engine's memory (optim/offload_optimizer.cpp): in fp32 the
  // master is the engine's shard, and the bf16 copy is the shard itself — counted above with
  // the model, not again here.
  const double moment_bytes = cfg.offload.optimizer_state_dtype == config::StateDtype::bf16 ? 4 : 8;
  const bool shares_engine_memory = !on_gpu;
  const bool master_is_shard = shares_engine_memory && !cfg.precision.bf16;
  const double state_bytes = ((master_is_shard ? 0 : 4) + moment_bytes) * n * cpu_share;
  p.host_optimizer_bytes = (4 + (cfg.precision.bf16 && !shares_engine_memory ? 2 : 0)) * n * cpu_share;
  if (nvme) {
    p.nvme_bytes = state_bytes;
    // Sub-groups lie within a layer's shard (optim::OffloadOptimizer): the ring's buffers are as
    // large as the largest one.
    const double sub_group = std::min({n * cpu_share, largest / ranks, static_cast<double>(cfg.zero.sub_group_size)});
    p.host_optimizer_bytes += static_cast<double>(cfg.offload.buffer_count) * (4 + moment_bytes) * sub_group;
  } else {
    p.host_optimizer_bytes += state_bytes;
  }
  // [checkpoint] async_save: a periodic save first copies every layer's master and moments in
  // fp32 (train/checkpointing), and the copy lives while training goes on beside its writing.
  if (cfg.checkpoint.async_save && cfg.checkpoint.every_steps > 0) p.host_optimizer_bytes += 12 * n;
  // Set-up beyond the shards: a resume maps the checkpoint's file in windows of at most a
  // layer's shard at a time (io::RankFileReader::kReadWindowBytes per thread); random
  // initialisation by shard draws one 16 MiB block per thread (model_io/random_init; until
  // 2026-11-27 it materialised a full fp32 layer, which this term was sized for); reading
  // safetensors by shard needs neither. A layer in fp32 stays the bound: for random
  // initialisation now an over-count (an 8B's largest layer, its embedding, is 2.1 GB).
  // A checkpoint save exports one layer's state at a time (train/checkpointing): where the
  // optimizer copies it (state on NVMe or in bf16, a layer of several sub-groups, a layer of
  // the device share — on a CPU run too, where `[offload] ratio` < 1 leaves the first
  // sub-groups, the embedding's, outside the CPU share — or, without offload, a GPU run's
  // device state), master and moments of the largest shard in fp32, 12 bytes a parameter. A
  // CPU-share layer of fp32 state in one sub-group is handed to the writer as it is
  // (optim::OffloadOptimizer::export_layer). A resume reads each layer into one buffer of that
  // size before the optimizer takes it. Both happen outside a step: on a CPU run, whose step's
  // transients are host memory, the layer's copy takes the place of those freed when the step
  // ends (the activations and the loss's logits; gathered layers and gradient buffers stay in
  // zero::BufferCache) and only what exceeds them is counted — summed until 2026-11-29, a 125M
  // Llama's 1-rank run that saved on exit lay at 1.13 of its peak (its logits alone, 375 MiB,
  // outweigh the embedding's 281). Set-up's layer is counted in full beside them (the bound
  // above).
  const bool saves = cfg.checkpoint.every_steps > 0 || cfg.checkpoint.save_on_exit;
  // Without offload, optim::ShardedAdamW copies a GPU run's device state and hands a CPU run's
  // over. With it, OffloadOptimizer's own rule; with `ratio` < 1 the largest layer is taken to
  // be in the device share (the first sub-groups, the embedding's), which with few sub-groups
  // may hold none: an over-count of one layer's copy at most.
  const auto largest_sub_groups =
      static_cast<size_t>(std::ceil(std::ceil(largest / ranks) / static_cast<double>(cfg.zero.sub_group_size)));
  const bool save_copies =
      cfg.offload.device == config::OffloadDevice::none
          ? on_gpu
          : optim::OffloadOptimizer::export_copies(largest_sub_groups, /*in_host_share=*/cpu_share >= 1, nvme,
                                                   cfg.offload.optimizer_state_dtype == config::StateDtype::bf16);
  const double step_transients = on_gpu ? 0 : p.device_activation_bytes + p.device_logits_bytes;
  const double layer_copy = (saves && save_copies) || resumes ? 12 * largest / ranks : 0.0;
  p.host_setup_bytes = std::max(4 * largest, layer_copy - step_transients);
  const double mib = 1024.0 * 1024;
  // Communication buffers appear when ranks first talk, after the baseline was measured. Found
  // by comparing each rank's peak RSS with its baseline and model terms (the tiny model and a
  // 125M Llama at 1, 2, 4 and 8 ranks, on an AMD EPYC VM): beyond a 1-rank run, Open MPI's
  // shared-memory transport maps about 1 MiB per peer on the node (RssShmem), and the largest
  // rank's anonymous memory grows by 5-15 MiB more (rank 0's, 10-15 MiB over the others; where
  // in rank 0 was not located further). Until 2026-11-29 this term was a residual calibrated
  // before the activation terms were exact (32 MiB + 2 per peer): at 8 ranks the plan came to
  // 1.05-1.11 of the ranks' peaks and failed memory_plan_rss's +10% on an AMD EPYC VM.
  const double communication = ranks > 1 ? 10 * mib + 1.5 * mib * std::min(ranks - 1, 15) : 0;
  p.host_runtime_bytes =
      process_baseline_bytes() + kAllocatorSlackBytes + communication + (on_gpu ? kCudaHostRuntimeBytes : 0);
  if (!on_gpu) {  // CPU runs: everything lives in host memory (no CUDA runtime)
    p.device_runtime_bytes = 0;
    p.device_workspace_bytes = 0;  // no cuBLAS; the norm sums host memory in place
    p.host_optimizer_bytes += p.device_total();
  }
  return p;
}

int64_t longest_sequence(const ModelSize& model, config::Config config, int ranks, int ranks_per_node, bool on_gpu,
                         double device_capacity_bytes, double host_capacity_per_node_bytes, int64_t granularity) {
  const int64_t sp = std::max<int64_t>(1, config.parallel.sequence_parallel_size);
  const int64_t step = (std::max<int64_t>(1, granularity) + sp - 1) / sp * sp;
  auto fits = [&](int64_t units) {
    config.data.seq_len = units * step;
    const auto plan = plan_memory(model, config, ranks, on_gpu);
    if (on_gpu && device_capacity_bytes > 0 && plan.device_total() > kPlanHeadroom * device_capacity_bytes) return false;
    return host_capacity_per_node_bytes <= 0 ||
           plan.host_total() * ranks_per_node <= kPlanHeadroom * host_capacity_per_node_bytes;
  };
  // Memory grows with the length (tiles only shrink a term that grows): double, then bisect.
  constexpr int64_t kMostUnits = int64_t{1} << 24;  // 16M steps: far beyond any node
  if (!fits(1)) return 0;
  int64_t good = 1, bad = 2;
  while (bad <= kMostUnits && fits(bad)) {
    good = bad;
    bad *= 2;
  }
  if (bad > kMostUnits) return good * step;
  while (bad - good > 1) {
    const int64_t middle = good + (bad - good) / 2;
    (fits(middle) ? good : bad) = middle;
  }
  return good * step;
}

int64_t mlp_tile_tokens(const config::Config& cfg, int64_t hidden) {
  // A rank's tokens of a micro-batch: its shard of each row under sequence parallelism.
  const int64_t tokens = std::max<int64_t>(1, cfg.training.train_micro_batch_size_per_gpu) * cfg.data.seq_len /
                         std::max<int64_t>(1, cfg.parallel.sequence_parallel_size);
  int64_t tile = cfg.model.tile_tokens;
  if (tile == 0) tile = tokens >= kTileFromTokens ? std::max<int64_t>(hidden, 1) : -1;
  return tile > 0 && tile < tokens ? tile : 0;
}

std::vector<std::string> describe_plan(const ModelSize& m, const MemoryPlan& p, int ranks_per_node,
                                       double device_capacity_bytes, double host_capacity_per_node_bytes) {
  std::vector<std::string> lines;
  std::ostringstream head;
  head.precision(3);
  head << m.architecture << ": " << static_cast<double>(m.parameters) / 1e9 << "B parameters";
  if (m.active_parameters != m.parameters) head << " (" << static_cast<double>(m.active_parameters) / 1e9 << "B active)";
  head << ", " << m.layers << " layers; " << p.ranks << " rank(s), " << ranks_per_node << " per node";
  lines.push_back(head.str());
  if (p.on_gpu) {
    lines.push_back("per GPU:  parameters " + gib(p.device_parameter_bytes) + ", gradients (device share) " +
                    gib(p.device_gradient_bytes) + ", gathered layers " + gib(p.device_gathered_bytes) +
                    ", layer gradients and reduce buckets " + gib(p.device_reduce_bytes) + ", activations " +
                    gib(p.device_activation_bytes) + ", loss logits " + gib(p.device_logits_bytes) +
                    ", optimizer share " + gib(p.device_optimizer_bytes) + ", workspaces " +
                    gib(p.device_workspace_bytes) + ", CUDA/NCCL runtime " +
                    gib(p.device_runtime_bytes) + " = " + gib(p.device_total()) +
                    (device_capacity_bytes > 0 ? " of " + gib(device_capacity_bytes) : ""));
  }
  lines.push_back(std::string("per rank, host: optimizer state ") + gib(p.host_optimizer_bytes - (p.on_gpu ? 0 : p.device_total())) +
                  (p.on_gpu ? "" : " + model, gradients and activations " + gib(p.device_total())) + ", set-up or a save's or resume's layer " +
                  gib(p.host_setup_bytes) +
                  (p.host_activation_bytes > 0 ? ", activation checkpoints " + gib(p.host_activation_bytes) : "") +
                  ", program and libraries " + gib(p.host_runtime_bytes) +
                  (p.on_gpu ? " (with the CUDA runtime's, estimated)" : "") + " = " + gib(p.host_total()));
  if (p.host_activation_bytes > 0 && p.on_gpu) {
    // Out in forward, back in backward, beside the computation on a copy stream.
    std::ostringstream copies;
    copies << std::fixed;
    copies.precision(0);
    const double moved = 2 * p.host_activation_bytes;
    copies << "per rank, activation offload: " << gib(moved) << " over the host link per micro-batch (out and back): "
           << moved / kNvlinkC2cBytesPerSecond * 1e3 << " ms at a GH200's 450 GB/s, "
           << moved / kPcie5BytesPerSecond * 1e3 << " ms at PCIe 5.0 x16's 64 GB/s";
    lines.push_back(copies.str());
  }
  if (p.sequence_parallel > 1) {
    std::ostringstream shard;
    shard << "sequence parallelism: groups of " << p.sequence_parallel << " ranks, each holding "
          << static_cast<int64_t>(p.rank_tokens) << " tokens of a micro-batch (its shard of every row); activations "
          << "count these";
    lines.push_back(shard.str());
  }
  if (p.expert_parallel > 1) {
    std::ostringstream experts;
    experts << "expert parallelism: groups of " << p.expert_parallel << " ranks, each computing "
            << m.experts / p.expert_parallel << " of the " << m.experts << " experts of every MoE layer; per rank and "
            << "micro-batch it gathers " << gib(p.gathered_bytes_per_micro_batch) << " of parameters ("
            << gib(p.gathered_bytes_without_expert_parallel) << " without), and sends "
            << gib(p.all_to_all_bytes_per_micro_batch) << " of routed hidden states by all-to-all; largest layer "
            << "a rank computes " << gib(p.largest_layer_bytes) << " (" << gib(p.largest_layer_bytes_without_expert_parallel)
            << " without)"
            << (p.ranks == p.expert_parallel ? "; each expert has one owner (no replicas), so experts are never gathered" : "");
    lines.push_back(experts.str());
  }
  if (p.mlp_tile_tokens > 0) {
    lines.push_back("MLP tiles: " + std::to_string(p.mlp_tile_tokens) +
                    " tokens at a time (activations count one tile's intermediates)");
  }
  if (p.nvme_bytes > 0) {
    lines.push_back("per rank, NVMe: optimizer state " + gib(p.nvme_bytes) + " (master and moments of the CPU share; "
                    "the host holds buffer_count sub-groups of it)");
  }
  lines.push_back("per node, host: " + gib(p.host_total() * ranks_per_node) +
                  (host_capacity_per_node_bytes > 0 ? " of " + gib(host_capacity_per_node_bytes) : ""));
  return lines;
}

std::optional<DeviceRefusal> refuse_device_memory(const ModelSize& m, const config::Config& cfg, int ranks,
                                                  const std::string& device, double free, double total) {
  auto need = [&](const config::Config& c, int n) {
    const auto p = plan_memory(m, c, n, true);
    return p.device_total() - p.device_runtime_bytes;
  };
  auto fits = [&](const config::Config& c, int n) { return need(c, n) <= kPlanHeadroom * free; };
  if (fits(cfg, ranks)) return std::nullopt;
  const auto plan = plan_memory(m, cfg, ranks, true);
  std::ostringstream message;
  message.precision(3);
  message << "this run needs about " << need(cfg, ranks) / 1e9 << " GB on " << device << " (parameters "
          << plan.device_parameter_bytes / 1e9 << ", gradients " << plan.device_gradient_bytes / 1e9 << ", gathered "
          << plan.device_gathered_bytes / 1e9 << ", reduce buckets " << plan.device_reduce_bytes / 1e9
          << ", activations " << plan.device_activation_bytes / 1e9 << ", logits " << plan.device_logits_bytes / 1e9
          << ", optimizer share " << plan.device_optimizer_bytes / 1e9 << ", workspaces "
          << plan.device_workspace_bytes / 1e9 << ") and the GPU has " << free / 1e9
          << " GB of " << total / 1e9 << " GB free: it would run out of device memory";
  std::vector<std::string> fixes;
  int more = ranks;
  while (more < (1 << 16) && !fits(cfg, more)) more *= 2;
  if (more < (1 << 16)) fixes.push_back("run on " + std::to_string(more) + " GPUs");
  if (cfg.offload.device != config::OffloadDevice::none) {
    auto higher = cfg;
    for (int step = static_cast<int>(std::floor(cfg.offload.ratio * 20 + 1e-9)) + 1; step <= 20; ++step) {
      higher.offload.ratio = step / 20.0;
      if (fits(higher, ranks)) {
        std::ostringstream text;
        text << "raise [offload] ratio to " << higher.offload.ratio;
        fixes.push_back(text.str());
        break;
      }
    }
  }
  auto smaller = cfg;
  for (int64_t micro = cfg.training.train_micro_batch_size_per_gpu - 1; micro >= 1; --micro) {
    smaller.training.train_micro_batch_size_per_gpu = micro;
    if (fits(smaller, ranks)) {
      fixes.push_back("lower [training] train_micro_batch_size_per_gpu to " + std::to_string(micro) +
                      " (and raise gradient_accumulation_steps to keep the batch)");
      break;
    }
  }
  if (!cfg.training.activation_checkpointing) fixes.push_back("set [training] activation_checkpointing = true");
  std::string fix;
  for (const auto& f : fixes) fix += (fix.empty() ? "" : ", or ") + f;
  fix = (fix.empty() ? std::string("this model does not fit this GPU") : fix) +
        "; `superoffload plan` shows the estimate for other shapes ([runtime] check_memory = false skips this check)";
  return DeviceRefusal{message.str(), fix};
}

namespace {
// LibTorch sets up lazily what the first products and attention of a step use: the thread
// pool's stacks and per-thread scratch, oneDNN's and MKL's kernel caches (about 15 MiB here,
// which the tiny model's plan at 1 rank missed by 5% on a Sapphire Rapids). Run them once on
// small tensors before measuring, so the baseline holds them. Deterministic values: no random
// numbers are drawn, so a run's initialisation is unchanged.
void warm_up_host_kernels() {
  const at::AutoGradMode with_gradients(true);  // also when the caller runs without (eval)
  const auto options = at::TensorOptions().dtype(at::kFloat);
  auto x = at::linspace(-1.0, 1.0, 64 * 256, options).reshape({64, 256}).requires_grad_(true);
  auto w = at::linspace(1.0, -1.0, 256 * 256, options).reshape({256, 256}).requires_grad_(true);
  auto q = at::matmul(x, w).reshape({1, 64, 4, 64}).transpose(1, 2);
  auto out = at::scaled_dot_product_attention(q, q, q, {}, 0.0, /*is_causal=*/true);
  at::silu(out).sum().backward();
}
}  // namespace

double process_baseline_bytes() {
  static const double bytes = [] {
    warm_up_host_kernels();
    std::ifstream in("/proc/self/statm");
    double pages = 0, resident = 0;
    in >> pages >> resident;
    return resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
  }();
  return bytes;
}

double available_host_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace superoffload::train
