// Rotary::cos_sin keeps its last answer for the micro-batch's position_ids tensor: every layer
// of a forward and of backward's recompute asks again with the same tensor. The kept answer
// must be returned only for that tensor, unchanged, in the same dtype; anything else is
// computed afresh (a stale answer would rotate by the wrong positions, silently).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/blocks/rotary.hpp"
#include "model/hf_config.hpp"

namespace so = superoffload;

namespace {

so::model::Rotary make_rotary() {
  const auto config = so::model::HfConfig::parse(
      R"({"architectures": ["LlamaForCausalLM"], "rope_theta": 10000.0, "max_position_embeddings": 64})", "config.json");
  return so::model::Rotary(config, 8);
}

// cos and sin computed directly from the definition, for comparison.
std::pair<at::Tensor, at::Tensor> reference(const at::Tensor& positions) {
  const auto inv = 1.0 / at::pow(10000.0, at::arange(0, 8, 2, at::kDouble) / 8.0);
  const auto freqs = positions.to(at::kDouble).unsqueeze(-1) * inv;
  const auto emb = at::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

TEST(Rotary, SameTensorIsAnsweredOnceAndOthersAfresh) {
  const auto rotary = make_rotary();
  auto positions = at::arange(6, at::kLong).unsqueeze(0).expand({2, 6}).contiguous();
  const auto [cos1, sin1] = rotary.cos_sin(positions, at::kFloat);
  const auto [ref_cos, ref_sin] = reference(positions);
  EXPECT_TRUE(at::allclose(cos1.to(at::kDouble), ref_cos, 0, 1e-6));
  EXPECT_TRUE(at::allclose(sin1.to(at::kDouble), ref_sin, 0, 1e-6));

  // The same tensor again: the same storage, not a second computation.
  const auto [cos2, sin2] = rotary.cos_sin(positions, at::kFloat);
  EXPECT_EQ(cos2.data_ptr(), cos1.data_ptr());
  EXPECT_EQ(sin2.data_ptr(), sin1.data_ptr());

  // Another dtype: computed in it.
  const auto [cos_bf16, sin_bf16] = rotary.cos_sin(positions, at::kBFloat16);
  EXPECT_EQ(cos_bf16.scalar_type(), at::kBFloat16);

  // Another tensor with other positions (packed documents restart at 0): its own answer.
  const auto other = at::tensor({0, 1, 2, 0, 1, 2}, at::kLong).reshape({1, 6});
  const auto [cos3, sin3] = rotary.cos_sin(other, at::kFloat);
  EXPECT_TRUE(at::allclose(cos3.to(at::kDouble), reference(other).first, 0, 1e-6));

  // The kept tensor changed in place: recomputed from the new positions.
  rotary.cos_sin(positions, at::kFloat);
  positions.add_(3);
  const auto [cos4, sin4] = rotary.cos_sin(positions, at::kFloat);
  EXPECT_TRUE(at::allclose(cos4.to(at::kDouble), reference(positions).first, 0, 1e-6));
  EXPECT_TRUE(at::allclose(sin4.to(at::kDouble), reference(positions).second, 0, 1e-6));
}

}  // namespace
