// The NCCL communicator under mpirun on device buffers: each collective against values
// computed by hand, and all-to-all with variable counts, gaps between the blocks and zero
// counts (the Ulysses and expert-parallel exchanges' call), in f32, bf16 and i64, at any
// world size. A lent GPU machine has one GPU and NCCL puts one rank on a GPU, so there it
// runs at one rank: each rank's pair with itself, through the same grouped send/receive code
// the exchanges run over several GPUs. The collectives' ordering with compute (events only) is
// exercised by queuing them behind work on a compute stream of the test's own. Skipped
// without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "cluster/mpi_world.hpp"
#include "comm/bf16.hpp"
#include "comm/nccl_communicator.hpp"

namespace so = superoffload;
extern so::cluster::MpiWorld* g_world;

namespace {

using so::comm::DataType;
using so::comm::ReduceOp;


// A device array filled from and read back into host vectors.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& values) : n_(values.size()) {
    // A failed allocation or copy ends the test with its CUDA error rather than handing NCCL a null buffer.
    const cudaError_t made = cudaMalloc(&data_, std::max<size_t>(n_, 1) * sizeof(T));
    if (made != cudaSuccess) throw std::runtime_error(std::string("cudaMalloc: ") + cudaGetErrorString(made));
    if (n_) cudaMemcpy(data_, values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return static_cast<T*>(data_); }
  std::vector<T> host() const {
    std::vector<T> out(n_);
    if (n_) cudaMemcpy(out.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return out;
  }

 private:
  void* data_ = nullptr;
  size_t n_;
};

class GpuCommunicator : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no GPU visible to CUDA";
    int rank = 0;
    MPI_Comm_rank(g_world->world(), &rank);
    device_ = rank % devices;
    ASSERT_EQ(cudaSetDevice(device_), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), cudaSuccess);
    comm_ = std::make_unique<so::comm::NcclCommunicator>(g_world->world(), device_, [this] { return compute_; });
  }
  void TearDown() override {
    comm_.reset();
    if (compute_) cudaStreamDestroy(compute_);
  }
  // What a collective's wait() made visible to the compute stream, seen from the host.
  void settle() { ASSERT_EQ(cudaStreamSynchronize(compute_), cudaSuccess); }

  int device_ = 0;
  cudaStream_t compute_ = nullptr;
  std::unique_ptr<so::comm::NcclCommunicator> comm_;
};

TEST_F(GpuCommunicator, CollectivesOnDeviceBuffers) {
  const int n = comm_->size(), r = comm_->rank();
  EXPECT_EQ(comm_->backend(), "nccl");
  std::vector<float> mine(5);
  for (int i = 0; i < 5; ++i) mine[static_cast<size_t>(i)] = static_cast<float>(100 * r + i);
  DeviceArray<float> send(mine), all(std::vector<float>(5 * static_cast<size_t>(n), -1.0f));
  comm_->all_gather(send.get(), all.get(), 5, DataType::f32)->wait();
  settle();
  const auto gathered = all.host();
  for (int q = 0; q < n; ++q) {
    for (int i = 0; i < 5; ++i) EXPECT_EQ(gathered[static_cast<size_t>(5 * q + i)], 100.0f * q + i);
  }
  // reduce_scatter: block q of every rank's buffer summed into rank q.
  std::vector<float> blocks(3 * static_cast<size_t>(n));
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<float>(i) + 0.25f * static_cast<float>(r);
  DeviceArray<float> scatter_send(blocks), scatter_recv(std::vector<float>(3, 0.0f));
  comm_->reduce_scatter(scatter_send.get(), scatter_recv.get(), 3, DataType::f32, ReduceOp::sum)->wait();
  settle();
  const auto reduced = scatter_recv.host();
  const float rank_sum = 0.25f * static_cast<float>(n * (n - 1) / 2);
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(reduced[static_cast<size_t>(i)], static_cast<float>(n * (3 * r + i)) + rank_sum);
  // all_reduce avg and max; broadcast of an i64 from rank 0.
  DeviceArray<double> value(std::vector<double>{1.5 * r});
  comm_->all_reduce(value.get(), 1, DataType::f64, ReduceOp::max)->wait();
  settle();
  EXPECT_EQ(value.host()[0], 1.5 * (n - 1));
  DeviceArray<float> average(std::vector<float>{static_cast<float>(2 * r)});
  comm_->all_reduce(average.get(), 1, DataType::f32, ReduceOp::avg)->wait();
  settle();
  EXPECT_FLOAT_EQ(average.host()[0], static_cast<float>(n - 1));
  DeviceArray<int64_t> token(std::vector<int64_t>{r == 0 ? 424242 : -1});
  auto work = comm_->broadcast(token.get(), 1, DataType::i64, 0);
  while (!work->done()) {
  }
  work->wait();
  settle();
  EXPECT_EQ(token.host()[0], 424242);
  comm_->barrier();
}

// Each rank d receives from rank s `count(s, d)` elements; the senders' blocks have a gap of
// one element between them and the receivers' blocks are packed.
TEST_F(GpuCommunicator, AllToAllWithVariableCountsGapsAndZeros) {
  const auto n = static_cast<size_t>(comm_->size()), me = static_cast<size_t>(comm_->rank());
  for (const size_t base : {size_t{0}, size_t{3}}) {  // base 0: every rank's pair with rank 0 is empty
    auto count = [&](size_t s, size_t d) { return (s + 2 * d) % 3 + (s == 0 || d == 0 ? base : base + 1); };
    std::vector<size_t> send_counts(n), send_offsets(n), recv_counts(n), recv_offsets(n);
    size_t at = 2;  // the first block does not start at the buffer's beginning
    for (size_t d = 0; d < n; ++d) {
      send_counts[d] = count(me, d);
      send_offsets[d] = at;
      at += send_counts[d] + 1;
    }
    std::vector<float> send(at, -1.0f);
    std::vector<int64_t> send_ids(at, -1);
    std::vector<uint16_t> send_words(at, 0);
    for (size_t d = 0; d < n; ++d) {
      for (size_t i = 0; i < send_counts[d]; ++i) {
        const float v = static_cast<float>(100 * me + 10 * d + i) + 0.5f;
        send[send_offsets[d] + i] = v;
        send_ids[send_offsets[d] + i] = static_cast<int64_t>(1'000'000'000'000 * (me + 1) + 1000 * d + i);
        send_words[send_offsets[d] + i] = so::comm::float_to_bf16(v);
      }
    }
    size_t total = 0;
    for (size_t s = 0; s < n; ++s) {
      recv_counts[s] = count(s, me);
      recv_offsets[s] = total;
      total += recv_counts[s];
    }
    DeviceArray<float> f32_send(send), f32_recv(std::vector<float>(total, -2.0f));
    DeviceArray<int64_t> i64_send(send_ids), i64_recv(std::vector<int64_t>(total, -2));
    DeviceArray<uint16_t> bf16_send(send_words), bf16_recv(std::vector<uint16_t>(total, 0));
    // Three exchanges in flight at once, then waited for in reverse order.
    auto a = comm_->all_to_all(f32_send.get(), send_counts, send_offsets, f32_recv.get(), recv_counts, recv_offsets,
                               DataType::f32);
    auto b = comm_->all_to_all(i64_send.get(), send_counts, send_offsets, i64_recv.get(), recv_counts, recv_offsets,
                               DataType::i64);
    auto c = comm_->all_to_all(bf16_send.get(), send_counts, send_offsets, bf16_recv.get(), recv_counts, recv_offsets,
                               DataType::bf16);
    c->wait();
    b->wait();
    a->wait();
    settle();
    const auto got = f32_recv.host();
    const auto ids = i64_recv.host();
    const auto words = bf16_recv.host();
    for (size_t s = 0; s < n; ++s) {
      for (size_t i = 0; i < recv_counts[s]; ++i) {
        const size_t k = recv_offsets[s] + i;
        const float v = static_cast<float>(100 * s + 10 * me + i) + 0.5f;
        EXPECT_EQ(got[k], v) << "f32 from " << s << ", element " << i << " (base " << base << ")";
        EXPECT_EQ(ids[k], static_cast<int64_t>(1'000'000'000'000 * (s + 1) + 1000 * me + i)) << "i64 from " << s;
        EXPECT_EQ(words[k], so::comm::float_to_bf16(v)) << "bf16 from " << s;
      }
    }
  }
}

TEST_F(GpuCommunicator, AllToAllRefusesALayoutOfAnotherWorld) {
  const auto n = static_cast<size_t>(comm_->size());
  std::vector<size_t> wrong(n + 1, 0), right(n, 0);
  DeviceArray<float> buffer(std::vector<float>(1, 0.0f));
  EXPECT_ANY_THROW(comm_->all_to_all(buffer.get(), wrong, right, buffer.get(), right, right, DataType::f32));
}

}  // namespace
