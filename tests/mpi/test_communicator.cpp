// The MPI communicator under mpirun: every collective against values computed by hand;
// bf16 sums are accumulated in fp32 (a bf16-by-bf16 sum over ranks would lose the small
// contributions), averages divide by the world size, and several collectives may be in
// flight at once; all-to-all with variable counts and offsets, on the world and on groups.
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

// Variable counts, as expert parallelism sends tokens to experts' ranks: rank s sends (s + d) % 3
// elements to rank d (some zero), laid out in reverse rank order with a gap, so offsets matter;
// each element says where it came from and its place. bf16 words travel unchanged. Ranks of a
// sub-communicator (MPI_Comm_split, as an expert- or sequence-parallel group) exchange among
// themselves only.
TEST(MpiCommunicator, AllToAllWithVariableCountsAndOffsets) {
  auto exchange = [](so::comm::Communicator& comm, int tag) {
    const auto n = static_cast<size_t>(comm.size());
    const auto me = static_cast<size_t>(comm.rank());
    auto count = [](size_t from, size_t to) { return (from + to) % 3; };
    std::vector<size_t> send_counts(n), send_offsets(n), recv_counts(n), recv_offsets(n);
    size_t at = 0;
    for (size_t d = n; d-- > 0;) {  // reverse order, one element of gap after each block
      send_counts[d] = count(me, d);
      send_offsets[d] = at;
      at += send_counts[d] + 1;
    }
    std::vector<float> send(at, -1.0f);
    for (size_t d = 0; d < n; ++d) {
      for (size_t i = 0; i < send_counts[d]; ++i) send[send_offsets[d] + i] = static_cast<float>(tag + 100 * me + 10 * d + i);
    }
    size_t total = 0;
    for (size_t s = 0; s < n; ++s) {
      recv_counts[s] = count(s, me);
      recv_offsets[s] = total;
      total += recv_counts[s];
    }
    std::vector<float> recv(total, -2.0f);
    comm.all_to_all(send.data(), send_counts, send_offsets, recv.data(), recv_counts, recv_offsets, DataType::f32)->wait();
    for (size_t s = 0; s < n; ++s) {
      for (size_t i = 0; i < recv_counts[s]; ++i) {
        EXPECT_EQ(recv[recv_offsets[s] + i], static_cast<float>(tag + 100 * s + 10 * me + i)) << "from " << s << ", " << i;
      }
    }
    // 16-bit words, one per peer.
    std::vector<size_t> ones(n, 1), offsets(n);
    std::iota(offsets.begin(), offsets.end(), size_t{0});
    std::vector<uint16_t> words(n), got(n);
    for (size_t d = 0; d < n; ++d) words[d] = so::comm::float_to_bf16(static_cast<float>(me * n + d) + 0.5f);
    comm.all_to_all(words.data(), ones, offsets, got.data(), ones, offsets, DataType::bf16)->wait();
    for (size_t s = 0; s < n; ++s) EXPECT_EQ(got[s], so::comm::float_to_bf16(static_cast<float>(s * n + me) + 0.5f));
  };
  so::comm::MpiCommunicator world(g_world->world());
  exchange(world, 0);
  // Groups of two consecutive ranks.
  MPI_Comm pairs = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(g_world->world(), world.rank() / 2, world.rank(), &pairs), MPI_SUCCESS);
  {
    so::comm::MpiCommunicator group(pairs);
    EXPECT_EQ(group.size(), std::min(2, world.size() - world.rank() / 2 * 2));
    exchange(group, 1000);
  }
  MPI_Comm_free(&pairs);
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
