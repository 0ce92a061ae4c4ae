// Causal attention with GQA and sliding windows.
#include "model/blocks/attention.hpp"

#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "model/blocks/env_switch.hpp"
#include "model/blocks/token_tiles.hpp"
#include "model/blocks/varlen_layout.hpp"

namespace superoffload::model {

namespace {

// Above this many tokens a row's attention builds no [seq, seq] tensor (16 MiB as a boolean
// mask here, 16 GiB at 128k): sliding windows run in blocks of queries, packed documents one by
// one. At and below it the one-call mask stays (measured faster for short documents).
constexpr int64_t kMaskTokens = 4096;
// Queries per block of a windowed attention over a long row: each block's mask is
// [kQueryBlock, kQueryBlock + window].
constexpr int64_t kQueryBlock = 512;

// Query i may see key j: j <= i, i - j < window when a window is set, and both in the same
// document when `documents` ([batch, seq]) is given. [seq, seq], or [batch, 1, seq, seq] with
// documents (broadcast over heads). Queries `query_begin` + [0, rows) against keys
// `key_begin` + [0, seq) when given (a block of a long row).
at::Tensor visibility(int64_t seq, int64_t window, const at::Tensor& documents, const at::TensorOptions& options,
                      int64_t rows = -1, int64_t query_begin = 0, int64_t key_begin = 0) {
  const auto i = at::arange(query_begin, query_begin + (rows < 0 ? seq : rows), options.dtype(at::kLong)).unsqueeze(1);
  const auto j = at::arange(key_begin, key_begin + seq, options.dtype(at::kLong)).unsqueeze(0);
  auto allowed = j <= i;
  if (window > 0) allowed = allowed.logical_and(i - j < window);
  if (documents.defined()) {
    const auto same = documents.unsqueeze(2).eq(documents.unsqueeze(1));  // [batch, seq, seq]
    allowed = allowed.unsqueeze(0).logical_and(same).unsqueeze(1);
  }
  return allowed;
}

at::Tensor repeat_kv(const at::Tensor& x, int64_t heads) {
  return x.size(1) == heads ? x : x.repeat_interleave(heads / x.size(1), 1);
}

// SUPEROFFLOAD_GQA_KERNEL=never: kv heads repeated before unmasked attention too, as before
// enable_gqa (for comparisons; read at each call, so that a benchmark can switch it).
bool repeats_kv_heads() { return env_switch_is("SUPEROFFLOAD_GQA_KERNEL", "never"); }

// A sliding window over a long row, in blocks of queries: block [begin, end) sees keys
// [begin - window + 1, end), through a mask of that size. Every block's outputs are the rows the
// whole-row mask would give (the same keys, in the same order). The mask is additive, in the
// queries' dtype, so the kernel keeps it as given (a boolean one it converts, and autograd would
// keep each block's copy); every block past the first window has the same one, made once.
at::Tensor attend_window_blocks(const at::Tensor& q, const at::Tensor& key, const at::Tensor& value, int64_t window) {
  const int64_t seq = q.size(2);
  auto additive = [&](int64_t rows, int64_t keys, int64_t begin, int64_t first_key) {
    const auto allowed = visibility(keys, window, {}, q.options(), rows, begin, first_key);
    return at::zeros({rows, keys}, q.options()).masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  };
  at::Tensor steady;  // [kQueryBlock, kQueryBlock + window - 1]: any full block with window - 1 keys before it
  std::vector<at::Tensor> blocks;
  for (int64_t begin = 0; begin < seq; begin += kQueryBlock) {
    const int64_t end = std::min(seq, begin + kQueryBlock), first_key = std::max<int64_t>(0, begin - window + 1);
    const bool full = end - begin == kQueryBlock && first_key == begin - window + 1;
    if (full && !steady.defined()) steady = additive(end - begin, end - first_key, begin, first_key);
    const auto mask = full ? steady : additive(end - begin, end - first_key, begin, first_key);
    blocks.push_back(at::scaled_dot_product_attention(q.narrow(2, begin, end - begin),
                                                      key.narrow(2, first_key, end - first_key),
                                                      value.narrow(2, first_key, end - first_key), mask, 0.0,
                                                      /*is_causal=*/false));
  }
  return at::cat(blocks, 2);
}

// The core on [batch, heads, seq, head_dim] queries and [batch, kv_heads, seq, head_dim] keys
// and values, without documents: the fused causal kernel, or a mask where a window cuts it (in
// blocks of queries on a long row).
// Without a mask the kernel takes the kv heads as they are (`enable_gqa`: FlashAttention's own
// grouped heads, on the CPU and on GPUs): no [batch, heads, seq, head_dim] copies of k and v,
// and their gradients summed over each group inside the kernel in fp32 rather than by
// repeat_interleave's backward in the compute dtype. (On an H100 the copies and that backward
// were about 4.5% of the 1.65B's kernel time.) Masked calls repeat the kv heads first: with a
// mask a GPU runs the memory-efficient kernel, which has no grouped heads and would fall back
// to the unfused math path.
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t sliding_window) {
  const int64_t heads = q.size(1), seq = q.size(2);
  if (sliding_window > 0 && sliding_window < seq) {
    const auto key = repeat_kv(k, heads), value = repeat_kv(v, heads);
    if (seq > kMaskTokens) return attend_window_blocks(q, key, value, sliding_window);
    return at::scaled_dot_product_attention(q, key, value, visibility(seq, sliding_window, {}, q.options()), 0.0,
                                            /*is_causal=*/false);
  }
  // fp32 on a GPU runs the memory-efficient kernel, which has no grouped heads either.
  if (k.size(1) != heads && (repeats_kv_heads() || (q.is_cuda() && q.scalar_type() == at::kFloat))) {
    return at::scaled_dot_product_attention(q, repeat_kv(k, heads), repeat_kv(v, heads), {}, 0.0, /*is_causal=*/true);
  }
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, /*scale=*/std::nullopt,
                                          /*enable_gqa=*/k.size(1) != heads);
}

// Packed documents on the CPU: each document of each row through the fused causal kernel on its
// own, which computes sum(L^2) scores instead of the mask's seq^2, at a fixed cost per call.
at::Tensor attend_per_document(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               int64_t sliding_window, const at::Tensor& documents) {
  const int64_t batch = q.size(0), seq = q.size(2);
  const auto ids = documents.to(at::kCPU).contiguous();
  const auto* id = ids.data_ptr<int64_t>();
  std::vector<at::Tensor> rows;
  rows.reserve(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<at::Tensor> parts;
    for (int64_t begin = 0, end = 1; end <= seq; ++end) {
      if (end < seq && id[b * seq + end] == id[b * seq + begin]) continue;
      auto part = [&](const at::Tensor& t) { return t.narrow(0, b, 1).narrow(2, begin, end - begin); };
      parts.push_back(attend(part(q), part(k), part(v), sliding_window));
      begin = end;
    }
    rows.push_back(parts.size() == 1 ? parts[0] : at::cat(parts, 2));
  }
  return at::cat(rows, 0);
}

// Whether a micro-batch's documents are long enough for one kernel call each on the CPU. Measured
// (bench_packed_attention, forward + backward against causal attention over the same tokens,
// AMD EPYC, AVX2): documents of 64..512 tokens in rows of 1024, per document 1.06x and mask
// 1.09x; of 16..128 in rows of 256 or 1024, per document 1.41x and mask 1.0x; of 64..1024 in
// rows of 4096, per document 0.87x and mask 1.31x. The crossover lies near 256 tokens a document.
bool documents_are_long(const at::Tensor& documents) {
  constexpr int64_t kLongDocument = 256;
  const int64_t batch = documents.size(0), seq = documents.size(1);
  const auto starts = documents.narrow(1, 1, seq - 1).ne(documents.narrow(1, 0, seq - 1)).sum().item<int64_t>();
  return batch * seq >= kLongDocument * (batch + starts);
}

// Packed documents on a GPU in bf16/fp16: FlashAttention's variable-length kernel over the
// documents of the whole micro-batch laid end to end ([tokens, heads, head_dim], documents
// delimited by cumulative lengths), which computes sum(L^2) scores and no [seq, seq] mask; GQA
// and the sliding window are the kernel's own. LibTorch registers no autograd formula for the
// operator (PyTorch's Python varlen_attn wraps it the same way), hence this Function.
class VarlenFlashAttention : public torch::autograd::Function<VarlenFlashAttention> {
 public:
  // q [tokens, heads, dim], k and v [tokens, kv_heads, dim]; `starts` int32 [documents + 1];
  // `window_left`: keys at most this far back (-1: no window).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& starts, int64_t longest, int64_t window_left) {
    auto [out, logsumexp, rng_state, unused, debug] =
        at::_flash_attention_forward(q, k, v, starts, starts, longest, longest, /*dropout_p=*/0.0, /*is_causal=*/true,
                                     /*return_debug_mask=*/false, std::nullopt, window_left, /*window_size_right=*/0);
    ctx->save_for_backward({q, k, v, out, logsumexp, starts, rng_state, unused});
    ctx->saved_data["longest"] = longest;
    ctx->saved_data["window_left"] = window_left;
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const int64_t longest = ctx->saved_data["longest"].toInt(), window_left = ctx->saved_data["window_left"].toInt();
    auto [dq, dk, dv] = at::_flash_attention_backward(grads[0].contiguous(), saved[0], saved[1], saved[2], saved[3],
                                                      saved[4], saved[5], saved[5], longest, longest, 0.0, true, saved[6],
                                                      saved[7], std::nullopt, window_left, 0);
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Whether FlashAttention's varlen kernel takes these inputs: CUDA, half precision, and a head
// size it was built for (fp32 runs keep the mask and the memory-efficient kernel).
bool varlen_flash_applies(const at::Tensor& q) {
  const auto dtype = q.scalar_type();
  const int64_t dim = q.size(3);
  return q.is_cuda() && (dtype == at::kBFloat16 || dtype == at::kHalf) && dim % 8 == 0 && dim <= 256;
}

// One document per row, for [batch, heads, seq, dim] queries: starts 0, seq, 2·seq, ...
VarlenLayout row_layout(const at::Tensor& q) {
  const int64_t batch = q.size(0), seq = q.size(2);
  return {at::arange(0, (batch + 1) * seq, seq, q.options().dtype(at::kInt)), seq};
}

// [batch, heads, seq, dim] in, [batch, seq, heads × dim] out: each document of each row attends
// only within itself through the varlen kernel.
at::Tensor attend_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t sliding_window,
                         const VarlenLayout& layout) {
  const int64_t batch = q.size(0), heads = q.size(1), seq = q.size(2), dim = q.size(3);
  auto tokens = [&](const at::Tensor& t) { return t.transpose(1, 2).reshape({batch * seq, t.size(1), dim}).contiguous(); };
  const int64_t window_left = sliding_window > 0 ? sliding_window - 1 : -1;  // i - j < window
  const auto out = VarlenFlashAttention::apply(tokens(q), tokens(k), tokens(v), layout.starts, layout.longest, window_left);
  return out.reshape({batch, seq, heads * dim});
}

}  // namespace

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t sliding_window,
                            const at::Tensor& document_ids) {
  const int64_t heads = q.size(1), seq = q.size(2);
  if (varlen_flash_applies(q)) {
    if (document_ids.defined()) return attend_varlen(q, k, v, sliding_window, varlen_layout(document_ids));
    // A window without documents: the same kernel, one document per row (its layout known on
    // the host), instead of SDPA with a [seq, seq] mask.
    if (sliding_window > 0 && sliding_window < seq) return attend_varlen(q, k, v, sliding_window, row_layout(q));
  }
  // Each kv head serves heads / kv_heads consecutive query heads.
  at::Tensor out;
  if (!document_ids.defined()) {
    out = attend(q, k, v, sliding_window);
  } else if (seq > kMaskTokens || (q.is_cpu() && documents_are_long(document_ids))) {
    // A long row takes no mask: each document through the causal kernel (or window blocks).
    out = attend_per_document(q, k, v, sliding_window, document_ids);
  } else {
    // One call with a block-causal boolean mask: on the CPU LibTorch's flash kernel takes it, on a
    // GPU in fp32 the memory-efficient kernel.
    out = at::scaled_dot_product_attention(q, repeat_kv(k, heads), repeat_kv(v, heads),
                                           visibility(seq, sliding_window, document_ids, q.options()), 0.0,
                                           /*is_causal=*/false);
  }
  return out.transpose(1, 2).reshape({q.size(0), seq, heads * q.size(3)});
}

namespace {

// Queries [begin, begin + rows) (`q_rows`) against the keys they may see, with each head's sink
// as an extra softmax column: [batch, heads, rows, head_dim].
at::Tensor sink_attention_rows(const at::Tensor& q_rows, const at::Tensor& key, const at::Tensor& value,
                               const at::Tensor& sinks, const at::Tensor& documents, int64_t window, int64_t begin) {
  const int64_t batch = q_rows.size(0), heads = q_rows.size(1), rows = q_rows.size(2), head_dim = q_rows.size(3);
  const int64_t end = begin + rows, first = window > 0 ? std::max<int64_t>(0, begin - window + 1) : 0;
  const int64_t keys = end - first;
  auto scores = at::matmul(q_rows, key.narrow(2, first, keys).transpose(2, 3)) *
                (1.0 / std::sqrt(static_cast<double>(head_dim)));
  auto allowed = visibility(keys, window, {}, q_rows.options(), rows, begin, first);  // [rows, keys]
  if (documents.defined()) {
    const auto same = documents.narrow(1, begin, rows).unsqueeze(2).eq(documents.narrow(1, first, keys).unsqueeze(1));
    allowed = allowed.unsqueeze(0).logical_and(same).unsqueeze(1);  // [batch, 1, rows, keys]
  }
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  const auto sink = sinks.to(scores.scalar_type()).reshape({1, heads, 1, 1}).expand({batch, heads, rows, 1});
  auto combined = at::cat({scores, sink}, -1);
  combined = combined - std::get<0>(combined.max(-1, /*keepdim=*/true));
  const auto probs = at::softmax(combined, -1).narrow(-1, 0, keys).to(value.scalar_type());
  return at::matmul(probs, value.narrow(2, first, keys));
}

}  // namespace

at::Tensor causal_attention_with_sinks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       int64_t sliding_window, const at::Tensor& sinks, const at::Tensor& document_ids) {
  const int64_t batch = q.size(0), heads = q.size(1), seq = q.size(2), head_dim = q.size(3);
  const auto key = repeat_kv(k, heads), value = repeat_kv(v, heads);
  at::Tensor out;
  if (seq <= kMaskTokens) {
    out = sink_attention_rows(q, key, value, sinks, document_ids, sliding_window, 0);
  } else {
    // A long row: blocks of queries, each block's scores (about 32 MiB in fp32) made in
    // forward and again in backward, never the whole row's [seq, seq] (model/blocks/token_tiles.hpp).
    const int64_t keys = sliding_window > 0 ? std::min(seq, sliding_window + kQueryBlock) : seq;
    const int64_t rows = std::clamp<int64_t>((int64_t{32} << 20) / (4 * batch * heads * keys), 16, kQueryBlock);
    const auto documents = document_ids;
    out = over_tiles({q}, {key, value, sinks}, /*dim=*/2, rows,
                     [documents, sliding_window](const std::vector<at::Tensor>& tile, const std::vector<at::Tensor>& whole,
                                                 int64_t begin) {
                       return sink_attention_rows(tile[0], whole[0], whole[1], whole[2], documents, sliding_window, begin);
                     });
  }
  return out.transpose(1, 2).reshape({batch, seq, heads * head_dim});
}

namespace {
thread_local VarlenLayoutCache* open_cache = nullptr;

VarlenLayout compute_layout(const at::Tensor& documents) {
  const int64_t batch = documents.size(0), seq = documents.size(1);
  // A document starts at each row's first token and wherever the id changes along a row.
  auto starts_here = at::ones({batch, seq}, documents.options().dtype(at::kBool));
  starts_here.narrow(1, 1, seq - 1).copy_(documents.narrow(1, 1, seq - 1).ne(documents.narrow(1, 0, seq - 1)));
  const auto first = starts_here.reshape({-1}).nonzero().reshape({-1});
  VarlenLayout layout;
  layout.starts = at::cat({first, at::full({1}, batch * seq, first.options())}).to(at::kInt);
  const int64_t documents_count = layout.starts.size(0) - 1;
  layout.longest =
      (layout.starts.narrow(0, 1, documents_count) - layout.starts.narrow(0, 0, documents_count)).max().item<int64_t>();
  return layout;
}
}  // namespace

VarlenLayoutCache::VarlenLayoutCache() : previous_(open_cache) { open_cache = this; }
VarlenLayoutCache::~VarlenLayoutCache() { open_cache = previous_; }

VarlenLayout varlen_layout(const at::Tensor& document_ids) {
  VarlenLayoutCache* cache = open_cache;
  if (cache == nullptr) return compute_layout(document_ids);
  if (!cache->documents_.defined() || !cache->documents_.is_same(document_ids) ||
      cache->version_ != document_ids._version()) {
    cache->layout_ = compute_layout(document_ids);
    cache->documents_ = document_ids;
    cache->version_ = document_ids._version();
  }
  return cache->layout_;
}

}  // namespace superoffload::model
