// NCCL backend.
#include "comm/nccl_communicator.hpp"

#include "cluster/check_cuda.hpp"
#include "cluster/check_mpi.hpp"
#include "comm/mpi_communicator.hpp"

namespace superoffload::comm {
namespace {

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::f64: return ncclFloat64;
    case DataType::f32: return ncclFloat32;
    case DataType::bf16: return ncclBfloat16;
    case DataType::f16: return ncclFloat16;
    case DataType::i64: return ncclInt64;
    case DataType::i32: return ncclInt32;
    case DataType::u8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

class NcclWork : public Work {
 public:
  NcclWork(int device, cudaEvent_t done, std::function<cudaStream_t()> compute_stream)
      : device_(device), done_(done), compute_stream_(std::move(compute_stream)) {}
  ~NcclWork() override {
    if (done_) cudaEventDestroy(done_);
  }
  void wait() override {
    if (waited_) return;
    SO_CHECK_CUDA(cudaSetDevice(device_));
    SO_CHECK_CUDA(cudaStreamWaitEvent(compute_stream_(), done_, 0));
    waited_ = true;
  }
  bool done() override {
    SO_CHECK_CUDA(cudaSetDevice(device_));
    const cudaError_t state = cudaEventQuery(done_);
    if (state == cudaErrorNotReady) return false;
    SO_CHECK_CUDA(state);
    return true;
  }

 private:
  int device_;
  cudaEvent_t done_;
  std::function<cudaStream_t()> compute_stream_;
  bool waited_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm mpi_comm, int device, std::function<cudaStream_t()> compute_stream)
    : device_(device), compute_stream_(std::move(compute_stream)) {
  SO_CHECK_MPI(MPI_Comm_rank(mpi_comm, &rank_));
  SO_CHECK_MPI(MPI_Comm_size(mpi_comm, &size_));
  ncclUniqueId id{};
  if (rank_ == 0) SO_CHECK_NCCL(ncclGetUniqueId(&id));
  SO_CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi_comm));
  SO_CHECK_MPI(MPI_Comm_dup(mpi_comm, &host_comm_));
  SO_CHECK_CUDA(cudaSetDevice(device_));
  SO_CHECK_NCCL(ncclCommInitRank(&comm_, size_, id, rank_));
  SO_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) ncclCommDestroy(comm_);
  if (stream_) cudaStreamDestroy(stream_);
  if (host_comm_ != MPI_COMM_NULL) MPI_Comm_free(&host_comm_);
}

std::unique_ptr<Work> NcclCommunicator::run(const std::function<void(cudaStream_t)>& launch) {
  SO_CHECK_CUDA(cudaSetDevice(device_));
  cudaEvent_t ready = nullptr, done = nullptr;
  SO_CHECK_CUDA(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  SO_CHECK_CUDA(cudaEventRecord(ready, compute_stream_()));
  SO_CHECK_CUDA(cudaStreamWaitEvent(stream_, ready, 0));
  SO_CHECK_CUDA(cudaEventDestroy(ready));  // destruction is deferred until the event completes
  launch(stream_);
  SO_CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  SO_CHECK_CUDA(cudaEventRecord(done, stream_));
  return std::make_unique<NcclWork>(device_, done, compute_stream_);
}

std::unique_ptr<Work> NcclCommunicator::all_gather(const void* send, void* recv, size_t count, DataType type) {
  return run([&](cudaStream_t s) { SO_CHECK_NCCL(ncclAllGather(send, recv, count, nccl_type(type), comm_, s)); });
}

std::unique_ptr<Work> NcclCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DataType type,
                                                       ReduceOp op) {
  return run([&](cudaStream_t s) {
    SO_CHECK_NCCL(ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op), comm_, s));
  });
}

std::unique_ptr<Work> NcclCommunicator::all_reduce(void* data, size_t count, DataType type, ReduceOp op) {
  return run([&](cudaStream_t s) {
    SO_CHECK_NCCL(ncclAllReduce(data, data, count, nccl_type(type), nccl_op(op), comm_, s));
  });
}

std::unique_ptr<Work> NcclCommunicator::broadcast(void* data, size_t count, DataType type, int root) {
  return run([&](cudaStream_t s) { SO_CHECK_NCCL(ncclBroadcast(data, data, count, nccl_type(type), root, comm_, s)); });
}

std::unique_ptr<Work> NcclCommunicator::all_to_all(const void* send, const std::vector<size_t>& send_counts,
                                                   const std::vector<size_t>& send_offsets, void* recv,
                                                   const std::vector<size_t>& recv_counts,
                                                   const std::vector<size_t>& recv_offsets, DataType type) {
  const auto ranks = static_cast<size_t>(size_);
  check_all_to_all_layout(size_, send_counts, send_offsets, recv_counts, recv_offsets);
  const size_t bytes = size_of(type);
  return run([&](cudaStream_t s) {
    // Point-to-point pairs in one group: NCCL has no all-to-all with variable counts of its own.
    SO_CHECK_NCCL(ncclGroupStart());
    for (size_t r = 0; r < ranks; ++r) {
      const int peer = static_cast<int>(r);
      if (send_counts[r] > 0) {
        SO_CHECK_NCCL(ncclSend(static_cast<const char*>(send) + send_offsets[r] * bytes, send_counts[r] * bytes,
                               ncclUint8, peer, comm_, s));
      }
      if (recv_counts[r] > 0) {
        SO_CHECK_NCCL(ncclRecv(static_cast<char*>(recv) + recv_offsets[r] * bytes, recv_counts[r] * bytes, ncclUint8,
                               peer, comm_, s));
      }
    }
    SO_CHECK_NCCL(ncclGroupEnd());
  });
}

void NcclCommunicator::barrier() {
  // A one-element all-reduce, waited for on the host.
  SO_CHECK_CUDA(cudaSetDevice(device_));
  float* scratch = nullptr;
  SO_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&scratch), sizeof(float), stream_));
  SO_CHECK_NCCL(ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm_, stream_));
  SO_CHECK_CUDA(cudaFreeAsync(scratch, stream_));
  SO_CHECK_CUDA(cudaStreamSynchronize(stream_));
}

void NcclCommunicator::all_reduce_host(double* values, size_t count, ReduceOp op) {
  all_reduce_host_over_mpi(host_comm_, values, count, op);
}

}  // namespace superoffload::comm
