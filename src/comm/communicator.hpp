// Collectives over flat buffers (pointer + element count + type), asynchronous: each call
// returns a Work handle to wait on, so communication can overlap compute. Backends: MPI on
// host buffers (CPU runs, tests) and NCCL on device buffers (GPU runs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace superoffload::comm {

enum class DataType { f64, f32, bf16, f16, i64, i32, u8 };
size_t size_of(DataType type);
const char* name_of(DataType type);
// For the backends' all_to_all: one count and one offset per rank in each vector, or a clear error.
void check_all_to_all_layout(int ranks, const std::vector<size_t>& send_counts, const std::vector<size_t>& send_offsets,
                             const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_offsets);

enum class ReduceOp { sum, avg, max };

// A pending collective. wait() makes its result usable by the caller: on the host for MPI,
// on the compute stream for NCCL (without blocking the host).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Without blocking: has the collective finished? MPI: also advances it (nonblocking MPI
  // collectives progress only inside MPI calls). NCCL: whether its stream got past it.
  virtual bool done() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi" | "nccl"

  // recv[r * count + i] = send_of_rank_r[i]; recv holds count × size elements.
  virtual std::unique_ptr<Work> all_gather(const void* send, void* recv, size_t count, DataType type) = 0;
  // recv[i] = op over ranks of send_of_rank[rank * count + i]; send holds count × size.
  virtual std::unique_ptr<Work> reduce_scatter(const void* send, void* recv, size_t count, DataType type,
                                               ReduceOp op) = 0;
  virtual std::unique_ptr<Work> all_reduce(void* data, size_t count, DataType type, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> broadcast(void* data, size_t count, DataType type, int root) = 0;
  // Each rank sends send_counts[r] elements from send + send_offsets[r] to rank r, and receives
  // recv_counts[r] elements from rank r at recv + recv_offsets[r] (counts and offsets in
  // elements, known on every rank: where they depend on data, e.g. tokens per expert, the
  // caller exchanges them first). Zero counts are allowed. The vectors are copied.
  virtual std::unique_ptr<Work> all_to_all(const void* send, const std::vector<size_t>& send_counts,
                                           const std::vector<size_t>& send_offsets, void* recv,
                                           const std::vector<size_t>& recv_counts,
                                           const std::vector<size_t>& recv_offsets, DataType type) = 0;
  virtual void barrier() = 0;

  // Blocking all-reduce of a few host values (token counts, loss sums, squared norms),
  // whatever the backend: NCCL reduces device buffers only, so these always travel over the
  // MPI communicator the backend was built from. avg divides the sum by the world size.
  virtual void all_reduce_host(double* values, size_t count, ReduceOp op) = 0;
};

}  // namespace superoffload::comm
