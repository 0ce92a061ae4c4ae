// The MPI communicator under mpirun: every collective against values computed by hand;
// bf16 sums are accumulated in fp32 (a bf16-by-bf16 sum over ranks would lose the small
// contributions), averages divide by the world size, and several collectives may be in
// flight at once.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <numeric>

#include "cluster/mpi_world.hpp"
#include "comm/bf16.hpp"
#include "comm/mpi_communicator.hpp"

namespace so = superoffload;
extern so::cluster::MpiWorld* g_world;

namespace {

using so::comm::DataType;
using so::comm::ReduceOp;

TEST(MpiCommunicator, AllGatherPlacesEachRanksBlock) {
  so::comm::MpiCommunicator comm(g_world->world());
  const int n = comm.size(), r = comm.rank();
  std::vector<float> mine(5), all(5 * static_cast<size_t>(n));
  for (int i = 0; i < 5; ++i) mine[static_cast<size_t>(i)] = static_cast<float>(100 * r + i);
  comm.all_gather(mine.data(), all.data(), 5, DataType::f32)->wait();
  for (int q = 0; q < n; ++q) {
    for (int i = 0; i < 5; ++i) EXPECT_EQ(all[static_cast<size_t>(5 * q + i)], 100.0f * q + i);
  }
}

TEST(MpiCommunicator, ReduceScatterSumsAndAverages) {
  so::comm::MpiCommunicator comm(g_world->world());
  const int n = comm.size(), r = comm.rank();
  std::vector<float> send(4 * static_cast<size_t>(n));
  for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(i) + static_cast<float>(r);
  std::vector<float> sum(4), avg(4);
  auto a = comm.reduce_scatter(send.data(), sum.data(), 4, DataType::f32, ReduceOp::sum);
  auto b = comm.reduce_scatter(send.data(), avg.data(), 4, DataType::f32, ReduceOp::avg);  // both in flight
  b->wait();
  a->wait();
  const float ranks_sum = static_cast<float>(n * (n - 1) / 2);
  for (int i = 0; i < 4; ++i) {
    const float index = static_cast<float>(4 * r + i);
    EXPECT_FLOAT_EQ(sum[static_cast<size_t>(i)], n * index + ranks_sum);
    EXPECT_FLOAT_EQ(avg[static_cast<size_t>(i)], (n * index + ranks_sum) / n);
  }
}

TEST(MpiCommunicator, Bf16IsReducedInFp32) {
  so::comm::MpiCommunicator comm(g_world->world());
  const int n = comm.size();
  // 256 plus n-1 ones: in bf16 (8 bits of mantissa) 256 + 1 rounds back to 256 every time,
  // so a bf16-by-bf16 sum gives 256; accumulated in fp32 it gives 256 + n - 1 (exact in bf16
  // for n <= 4 after rounding to nearest even: 257 → 256, 258, 259 → 260).
  std::vector<uint16_t> data(1, so::comm::float_to_bf16(g_world->rank() == 0 ? 256.0f : 1.0f));
  comm.all_reduce(data.data(), 1, DataType::bf16, ReduceOp::sum)->wait();
  const float expected = so::comm::bf16_to_float(so::comm::float_to_bf16(256.0f + static_cast<float>(n - 1)));
  EXPECT_EQ(so::comm::bf16_to_float(data[0]), expected);
  if (n == 4) EXPECT_EQ(expected, 260.0f);
}

TEST(MpiCommunicator, AllReduceMaxAndBroadcast) {
  so::comm::MpiCommunicator comm(g_world->world());
  double value = comm.rank() * 1.5;
  comm.all_reduce(&value, 1, DataType::f64, ReduceOp::max)->wait();
  EXPECT_EQ(value, (comm.size() - 1) * 1.5);
  int64_t token = comm.rank() == 0 ? 424242 : -1;
  comm.broadcast(&token, 1, DataType::i64, 0)->wait();
  EXPECT_EQ(token, 424242);
  comm.barrier();
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(so::comm::float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(so::comm::bf16_to_float(so::comm::float_to_bf16(1.00390625f)), 1.0f);      // halfway: to even
  EXPECT_EQ(so::comm::bf16_to_float(so::comm::float_to_bf16(1.01171875f)), 1.015625f); // halfway: to even (up)
  EXPECT_TRUE(std::isnan(so::comm::bf16_to_float(so::comm::float_to_bf16(std::nanf("")))));
}

}  // namespace
