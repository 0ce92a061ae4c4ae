// Activation checkpoints in host memory on the CPU path (zero/activation_offload.hpp): what
// comes back is bitwise what went out, in any order and dtype; take() waits for copies that are
// late (an injected delay on the copy thread, so a take that did not wait would read a tensor
// not yet written); host buffers are reused across micro-batches and grow when a shape does.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <vector>

#include "zero/activation_offload.hpp"

namespace {

using superoffload::zero::ActivationOffload;

std::vector<at::Tensor> layer_inputs(int layers, at::IntArrayRef shape, at::ScalarType dtype, int seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> inputs;
  for (int i = 0; i < layers; ++i) inputs.push_back(at::randn(shape).to(dtype));
  return inputs;
}

TEST(ActivationOffload, InputsComeBackBitwiseInReverseOrder) {
  ActivationOffload offload(at::kCPU, /*pin=*/false);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const auto inputs = layer_inputs(5, {2, 33, 16}, dtype, 1);
    for (size_t i = 1; i < inputs.size(); ++i) offload.store(i, inputs[i].clone());
    for (size_t i = inputs.size(); i-- > 1;) {
      if (i > 1) offload.prefetch(i - 1);
      const auto back = offload.take(i);
      EXPECT_EQ(back.scalar_type(), dtype);
      EXPECT_EQ(back.sizes(), inputs[i].sizes());
      EXPECT_TRUE(at::equal(back, inputs[i])) << "layer " << i;
    }
  }
}

TEST(ActivationOffload, TakeWaitsForLateCopies) {
  // 30 ms before every copy: 4 stores and 4 fetches queue 240 ms of delay behind them.
  ActivationOffload offload(at::kCPU, /*pin=*/false, std::chrono::milliseconds(30));
  const auto inputs = layer_inputs(4, {64, 128}, at::kFloat, 2);
  for (size_t i = 0; i < inputs.size(); ++i) offload.store(i, inputs[i].clone());
  for (size_t i = inputs.size(); i-- > 0;) EXPECT_TRUE(at::equal(offload.take(i), inputs[i])) << "layer " << i;
  EXPECT_GT(offload.wait_seconds(), 0.1) << "the copies were late: take() must have waited for them";
}

TEST(ActivationOffload, BuffersAreReusedAndGrowWithTheShape) {
  ActivationOffload offload(at::kCPU, /*pin=*/false);
  for (int micro_batch = 0; micro_batch < 3; ++micro_batch) {
    const auto inputs = layer_inputs(3, {4, 10, 8}, at::kFloat, 10 + micro_batch);
    for (size_t i = 0; i < inputs.size(); ++i) offload.store(i, inputs[i]);
    for (size_t i = inputs.size(); i-- > 0;) EXPECT_TRUE(at::equal(offload.take(i), inputs[i]));
    EXPECT_EQ(offload.host_bytes(), 3 * 4 * 10 * 8 * 4) << "micro-batch " << micro_batch;
  }
  const auto longer = layer_inputs(1, {4, 20, 8}, at::kFloat, 20);
  offload.store(0, longer[0]);
  EXPECT_TRUE(at::equal(offload.take(0), longer[0]));
  EXPECT_EQ(offload.host_bytes(), (2 * 4 * 10 * 8 + 4 * 20 * 8) * 4);
  // A shorter input reuses the larger buffer.
  const auto shorter = layer_inputs(1, {4, 5, 8}, at::kFloat, 21);
  offload.store(0, shorter[0]);
  EXPECT_TRUE(at::equal(offload.take(0), shorter[0]));
  EXPECT_EQ(offload.host_bytes(), (2 * 4 * 10 * 8 + 4 * 20 * 8) * 4);
}

TEST(ActivationOffload, AStoreLeftByAnInterruptedMicroBatchIsReplaced) {
  ActivationOffload offload(at::kCPU, /*pin=*/false, std::chrono::milliseconds(5));
  const auto first = layer_inputs(2, {8, 8}, at::kFloat, 3);
  offload.store(1, first[0]);  // never taken: that micro-batch ended by an exception
  offload.store(1, first[1]);
  EXPECT_TRUE(at::equal(offload.take(1), first[1]));
}

TEST(ActivationOffload, NonContiguousInputsComeBackContiguous) {
  ActivationOffload offload(at::kCPU, /*pin=*/false);
  const auto input = layer_inputs(1, {6, 10}, at::kFloat, 4)[0].t();
  offload.store(0, input);
  const auto back = offload.take(0);
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_TRUE(at::equal(back, input));
}

}  // namespace
