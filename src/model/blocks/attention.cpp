// Causal attention with GQA and sliding windows.
#include "model/blocks/attention.hpp"

#include <cmath>
#include <limits>

namespace superoffload::model {

namespace {

// Query i may see key j: j <= i, i - j < window when a window is set, and both in the same
// document when `documents` ([batch, seq]) is given. [seq, seq], or [batch, 1, seq, seq] with
// documents (broadcast over heads).
at::Tensor visibility(int64_t seq, int64_t window, const at::Tensor& documents, const at::TensorOptions& options) {
  const auto i = at::arange(seq, options.dtype(at::kLong)).unsqueeze(1);
  const auto j = at::arange(seq, options.dtype(at::kLong)).unsqueeze(0);
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

}  // namespace

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t sliding_window,
                            const at::Tensor& document_ids) {
  const int64_t heads = q.size(1), seq = q.size(2);
  // Each kv head serves heads / kv_heads consecutive query heads.
  const auto key = repeat_kv(k, heads), value = repeat_kv(v, heads);
  at::Tensor out;
  if (document_ids.defined() || (sliding_window > 0 && sliding_window < seq)) {
    // A boolean mask: LibTorch's CPU flash kernel takes it at the cost of is_causal (measured in
    // bench_packed_attention); on a GPU the memory-efficient kernel does.
    out = at::scaled_dot_product_attention(q, key, value, visibility(seq, sliding_window, document_ids, q.options()),
                                           0.0, /*is_causal=*/false);
  } else {
    out = at::scaled_dot_product_attention(q, key, value, {}, 0.0, /*is_causal=*/true);
  }
  return out.transpose(1, 2).reshape({q.size(0), seq, heads * q.size(3)});
}

}  // namespace superoffload::model

namespace superoffload::model {

at::Tensor causal_attention_with_sinks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       int64_t sliding_window, const at::Tensor& sinks, const at::Tensor& document_ids) {
  const int64_t batch = q.size(0), heads = q.size(1), seq = q.size(2), head_dim = q.size(3);
  const auto key = repeat_kv(k, heads), value = repeat_kv(v, heads);
  auto scores = at::matmul(q, key.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
  scores = scores.masked_fill(visibility(seq, sliding_window, document_ids, q.options()).logical_not(),
                              -std::numeric_limits<double>::infinity());
  const auto sink = sinks.to(scores.scalar_type()).reshape({1, heads, 1, 1}).expand({batch, heads, seq, 1});
  auto combined = at::cat({scores, sink}, -1);
  combined = combined - std::get<0>(combined.max(-1, /*keepdim=*/true));
  const auto probs = at::softmax(combined, -1).narrow(-1, 0, seq).to(value.scalar_type());
  return at::matmul(probs, value).transpose(1, 2).reshape({batch, seq, heads * head_dim});
}

}  // namespace superoffload::model
