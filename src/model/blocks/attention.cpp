// Causal attention with GQA and sliding windows.
#include "model/blocks/attention.hpp"

#include <cmath>
#include <limits>
#include <vector>

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

// The core on [batch, heads, seq, head_dim] without documents: the fused causal kernel, or a
// boolean mask where a window cuts it.
at::Tensor attend(const at::Tensor& q, const at::Tensor& key, const at::Tensor& value, int64_t sliding_window) {
  const int64_t seq = q.size(2);
  if (sliding_window > 0 && sliding_window < seq) {
    return at::scaled_dot_product_attention(q, key, value, visibility(seq, sliding_window, {}, q.options()), 0.0,
                                            /*is_causal=*/false);
  }
  return at::scaled_dot_product_attention(q, key, value, {}, 0.0, /*is_causal=*/true);
}

// Packed documents on the CPU: each document of each row through the fused causal kernel on its
// own, which computes sum(L^2) scores instead of the mask's seq^2, at a fixed cost per call.
at::Tensor attend_per_document(const at::Tensor& q, const at::Tensor& key, const at::Tensor& value,
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
      parts.push_back(attend(part(q), part(key), part(value), sliding_window));
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

}  // namespace

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t sliding_window,
                            const at::Tensor& document_ids) {
  const int64_t heads = q.size(1), seq = q.size(2);
  // Each kv head serves heads / kv_heads consecutive query heads.
  const auto key = repeat_kv(k, heads), value = repeat_kv(v, heads);
  at::Tensor out;
  if (!document_ids.defined()) {
    out = attend(q, key, value, sliding_window);
  } else if (q.is_cpu() && documents_are_long(document_ids)) {
    out = attend_per_document(q, key, value, sliding_window, document_ids);
  } else {
    // One call with a block-causal boolean mask: on the CPU LibTorch's flash kernel takes it, on a
    // GPU the memory-efficient kernel.
    out = at::scaled_dot_product_attention(q, key, value, visibility(seq, sliding_window, document_ids, q.options()),
                                           0.0, /*is_causal=*/false);
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
