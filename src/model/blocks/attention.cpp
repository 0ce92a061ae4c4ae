// Causal attention with GQA and sliding windows.
#include "model/blocks/attention.hpp"

namespace superoffload::model {

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t sliding_window) {
  const int64_t heads = q.size(1), kv_heads = k.size(1), seq = q.size(2);
  at::Tensor key = k, value = v;
  if (kv_heads != heads) {
    // Each kv head serves heads / kv_heads consecutive query heads.
    key = k.repeat_interleave(heads / kv_heads, 1);
    value = v.repeat_interleave(heads / kv_heads, 1);
  }
  at::Tensor out;
  if (sliding_window > 0 && sliding_window < seq) {
    const auto i = at::arange(seq, q.options().dtype(at::kLong)).unsqueeze(1);
    const auto j = at::arange(seq, q.options().dtype(at::kLong)).unsqueeze(0);
    const auto allowed = (j <= i).logical_and(i - j < sliding_window);
    out = at::scaled_dot_product_attention(q, key, value, allowed, 0.0, /*is_causal=*/false);
  } else {
    out = at::scaled_dot_product_attention(q, key, value, {}, 0.0, /*is_causal=*/true);
  }
  return out.transpose(1, 2).reshape({q.size(0), seq, heads * q.size(3)});
}

}  // namespace superoffload::model
