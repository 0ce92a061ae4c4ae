// SelfAttention.
#include "model/blocks/self_attention.hpp"

#include "model/blocks/sequence_parallel_attention.hpp"
#include "model/blocks/rotary.hpp"
#include "model/blocks/stacked_weights.hpp"

namespace superoffload::model {

SelfAttention::SelfAttention(const SelfAttentionOptions& o) : o_(o) {
  const int64_t q = o.heads * o.head_dim, kv = o.kv_heads * o.head_dim;
  if (o.fused_qkv) {
    qkv_proj = register_module("qkv_proj", std::make_shared<Linear>(o.hidden, q + 2 * kv, o.qkv_bias));
  } else {
    q_proj = register_module("q_proj", std::make_shared<Linear>(o.hidden, q, o.qkv_bias));
    k_proj = register_module("k_proj", std::make_shared<Linear>(o.hidden, kv, o.qkv_bias));
    v_proj = register_module("v_proj", std::make_shared<Linear>(o.hidden, kv, o.qkv_bias));
  }
  o_proj = register_module("o_proj", std::make_shared<Linear>(q, o.hidden, o.o_bias));
  if (o.qk_norm) {
    q_norm = register_module("q_norm", std::make_shared<RMSNorm>(o.head_dim, o.norm_eps));
    k_norm = register_module("k_norm", std::make_shared<RMSNorm>(o.head_dim, o.norm_eps));
  }
  if (o.sinks) sinks = register_parameter("sinks", at::zeros({o.heads}));
}

at::Tensor SelfAttention::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                  int64_t sliding_window, const BatchContext& context) {
  const int64_t b = x.size(0), t = x.size(1);
  at::Tensor q, k, v;
  if (qkv_proj) {
    const auto qkv = (*qkv_proj)(x);
    const int64_t nq = o_.heads * o_.head_dim, nkv = o_.kv_heads * o_.head_dim;
    q = qkv.narrow(-1, 0, nq);
    k = qkv.narrow(-1, nq, nkv);
    v = qkv.narrow(-1, nq + nkv, nkv);
  } else if (const auto qkv_weight = q_proj->bias.defined() || !fuses_projections(x.device())
                                        ? at::Tensor()
                                        : stacked_in_place({q_proj->weight, k_proj->weight, v_proj->weight});
             qkv_weight.defined()) {
    // q, k and v back to back (a gathered layer, when asked for): one product for the three in
    // forward; in backward split_with_sizes joins their gradients into one tensor, so the input's
    // and the weights' gradients are one product each.
    const auto qkv = at::linear(x, qkv_weight).split_with_sizes({q_proj->weight.size(0), k_proj->weight.size(0),
                                                                 v_proj->weight.size(0)}, -1);
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  } else {
    q = (*q_proj)(x);
    k = (*k_proj)(x);
    v = (*v_proj)(x);
  }
  q = q.view({b, t, o_.heads, o_.head_dim});
  k = k.view({b, t, o_.kv_heads, o_.head_dim});
  v = v.view({b, t, o_.kv_heads, o_.head_dim});
  if (q_norm) {
    q = (*q_norm)(q);
    k = (*k_norm)(k);
  }
  q = Rotary::apply(q.transpose(1, 2), cos, sin);
  k = Rotary::apply(k.transpose(1, 2), cos, sin);
  const auto out = causal_attention_in_context(q, k, v.transpose(1, 2), sliding_window, sinks, context);
  return (*o_proj)(out);
}

}  // namespace superoffload::model
