// MPI backend.
#include "comm/mpi_communicator.hpp"

#include <cstring>
#include <limits>
#include <vector>

#include "cluster/check_mpi.hpp"
#include "comm/bf16.hpp"

namespace superoffload::comm {
namespace {

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::f64: return MPI_DOUBLE;
    case DataType::f32: return MPI_FLOAT;
    case DataType::i64: return MPI_INT64_T;
    case DataType::i32: return MPI_INT32_T;
    case DataType::u8: return MPI_UINT8_T;
    case DataType::bf16:
    case DataType::f16: return MPI_UINT16_T;  // moved as raw 16-bit words
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

// Counts above INT_MAX need MPI-4 "large count" calls; refuse them clearly instead.
int checked_count(size_t count) {
  SO_CHECK(count <= static_cast<size_t>(std::numeric_limits<int>::max()),
           "a collective of " << count << " elements exceeds MPI's int count"
                              << hint("use a smaller [zero] reduce_bucket_size / sub_group_size"));
  return static_cast<int>(count);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = mantissa;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

uint16_t float_to_half(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffffu;
  if (((bits >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0));
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - exponent);
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | static_cast<uint32_t>(exponent) << 10 | mantissa >> 13;
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent: correct
  return static_cast<uint16_t>(half);
}

void to_float(const void* in, float* out, size_t count, DataType type) {
  const auto* words = static_cast<const uint16_t*>(in);
  for (size_t i = 0; i < count; ++i) out[i] = type == DataType::bf16 ? bf16_to_float(words[i]) : half_to_float(words[i]);
}

void from_float(const float* in, void* out, size_t count, DataType type) {
  auto* words = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < count; ++i) words[i] = type == DataType::bf16 ? float_to_bf16(in[i]) : float_to_half(in[i]);
}

void divide(void* data, size_t count, DataType type, int by) {
  if (type == DataType::f64) {
    auto* values = static_cast<double*>(data);
    for (size_t i = 0; i < count; ++i) values[i] /= by;
  } else if (type == DataType::f32) {
    auto* values = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) values[i] /= static_cast<float>(by);
  } else {
    SO_FAIL("average of " << name_of(type) << " is only defined for floating-point data");
  }
}

// A request plus whatever must happen once it completes: 16-bit float results come back
// from their fp32 staging copy, and averages divide the sum by the world size.
class MpiWork : public Work {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<float> staging_in, staging_out;  // fp32 copies of 16-bit float data
  void* result = nullptr;                      // where the caller expects the result
  size_t count = 0;
  DataType type = DataType::f32;               // the caller's type
  int average_over = 0;                        // > 0: divide the sum by this
  std::vector<int> counts_and_offsets;         // all-to-all: MPI reads them until the call completes

  void wait() override {
    if (done_) return;
    SO_CHECK_MPI(MPI_Wait(&request, MPI_STATUS_IGNORE));
    finish();
  }
  bool done() override {
    if (done_) return true;
    int flag = 0;
    SO_CHECK_MPI(MPI_Test(&request, &flag, MPI_STATUS_IGNORE));
    if (flag) finish();
    return done_;
  }

 private:
  void finish() {
    done_ = true;
    if (type == DataType::bf16 || type == DataType::f16) {
      if (average_over > 0) divide(staging_out.data(), count, DataType::f32, average_over);
      from_float(staging_out.data(), result, count, type);
    } else if (average_over > 0) {
      divide(result, count, type, average_over);
    }
  }

  bool done_ = false;
};

bool is_half(DataType type) { return type == DataType::bf16 || type == DataType::f16; }

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) {
  SO_CHECK_MPI(MPI_Comm_dup(comm, &comm_));
  SO_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  SO_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  SO_CHECK_MPI(MPI_Comm_size(comm_, &size_));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<Work> MpiCommunicator::all_gather(const void* send, void* recv, size_t count, DataType type) {
  auto work = std::make_unique<MpiWork>();
  const int n = checked_count(count);
  SO_CHECK_MPI(MPI_Iallgather(send, n, mpi_type(type), recv, n, mpi_type(type), comm_, &work->request));
  return work;
}

std::unique_ptr<Work> MpiCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DataType type,
                                                      ReduceOp op) {
  auto work = std::make_unique<MpiWork>();
  const int n = checked_count(count);
  checked_count(count * static_cast<size_t>(size_));
  if (is_half(type)) {
    work->staging_in.resize(count * static_cast<size_t>(size_));
    work->staging_out.resize(count);
    to_float(send, work->staging_in.data(), work->staging_in.size(), type);
    SO_CHECK_MPI(MPI_Ireduce_scatter_block(work->staging_in.data(), work->staging_out.data(), n, MPI_FLOAT, mpi_op(op),
                                           comm_, &work->request));
  } else {
    SO_CHECK_MPI(MPI_Ireduce_scatter_block(send, recv, n, mpi_type(type), mpi_op(op), comm_, &work->request));
  }
  work->result = recv;
  work->count = count;
  work->type = type;
  if (op == ReduceOp::avg) work->average_over = size_;
  return work;
}

std::unique_ptr<Work> MpiCommunicator::all_reduce(void* data, size_t count, DataType type, ReduceOp op) {
  auto work = std::make_unique<MpiWork>();
  const int n = checked_count(count);
  if (is_half(type)) {
    work->staging_out.resize(count);
    to_float(data, work->staging_out.data(), count, type);
    SO_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, work->staging_out.data(), n, MPI_FLOAT, mpi_op(op), comm_, &work->request));
  } else {
    SO_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, data, n, mpi_type(type), mpi_op(op), comm_, &work->request));
  }
  work->result = data;
  work->count = count;
  work->type = type;
  if (op == ReduceOp::avg) work->average_over = size_;
  return work;
}

std::unique_ptr<Work> MpiCommunicator::broadcast(void* data, size_t count, DataType type, int root) {
  auto work = std::make_unique<MpiWork>();
  SO_CHECK_MPI(MPI_Ibcast(data, checked_count(count), mpi_type(type), root, comm_, &work->request));
  return work;
}

std::unique_ptr<Work> MpiCommunicator::all_to_all(const void* send, const std::vector<size_t>& send_counts,
                                                  const std::vector<size_t>& send_offsets, void* recv,
                                                  const std::vector<size_t>& recv_counts,
                                                  const std::vector<size_t>& recv_offsets, DataType type) {
  const auto ranks = static_cast<size_t>(size_);
  check_all_to_all_layout(size_, send_counts, send_offsets, recv_counts, recv_offsets);
  auto work = std::make_unique<MpiWork>();
  // 16-bit floats travel as raw words: nothing is reduced.
  auto& v = work->counts_and_offsets;
  v.resize(4 * ranks);
  for (size_t r = 0; r < ranks; ++r) {
    v[r] = checked_count(send_counts[r]);
    v[ranks + r] = checked_count(send_offsets[r]);
    v[2 * ranks + r] = checked_count(recv_counts[r]);
    v[3 * ranks + r] = checked_count(recv_offsets[r]);
  }
  SO_CHECK_MPI(MPI_Ialltoallv(send, v.data(), v.data() + ranks, mpi_type(type), recv, v.data() + 2 * ranks,
                              v.data() + 3 * ranks, mpi_type(type), comm_, &work->request));
  return work;
}

void MpiCommunicator::barrier() { SO_CHECK_MPI(MPI_Barrier(comm_)); }

void all_reduce_host_over_mpi(MPI_Comm comm, double* values, size_t count, ReduceOp op) {
  SO_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, values, checked_count(count), MPI_DOUBLE, mpi_op(op), comm));
  if (op != ReduceOp::avg) return;
  int size = 1;
  SO_CHECK_MPI(MPI_Comm_size(comm, &size));
  for (size_t i = 0; i < count; ++i) values[i] /= size;
}

void MpiCommunicator::all_reduce_host(double* values, size_t count, ReduceOp op) {
  all_reduce_host_over_mpi(comm_, values, count, op);
}

}  // namespace superoffload::comm
