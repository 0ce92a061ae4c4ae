// Checkpoint write and read bandwidth for a ~1 GB optimizer state (fp32 master + two moments),
// against a plain sequential write (+ fsync) and read of the same bytes to the same disk in
// the same run. The checkpoint adds HDF5 chunking, Fletcher32, a CRC32 pass, fsyncs and the
// manifest/DONE protocol; the ratio says what that costs. Reads run on a warm page cache for
// both (dropping caches needs privileges a job rarely has).
//
//   mpirun -np 1 build/bin/bench_checkpoint [--gb 1] [--dir /tmp/so_bench_ckpt]
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/timer.hpp"
#include "io/checkpoint_files.hpp"
#include "io/checkpoint_reader.hpp"
#include "io/checkpoint_writer.hpp"

namespace io = superoffload::io;
using superoffload::base::now_s;

namespace {

// Seconds from a barrier before `work` to a barrier after it: the slowest rank's time.
template <typename Work>
double collective_seconds(Work&& work) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = now_s();
  work();
  MPI_Barrier(MPI_COMM_WORLD);
  return now_s() - start;
}

int open_or_abort(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    std::perror(path.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return fd;
}

// Writes or reads all `size` bytes at `data` (the calls may move fewer at a time).
void transfer_all(int fd, char* data, size_t size, bool write) {
  while (size > 0) {
    const ssize_t n = write ? ::write(fd, data, size) : ::read(fd, data, size);
    if (n <= 0) {
      std::perror(write ? "write" : "read");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  double gigabytes = 1.0;
  std::string dir = "/tmp/so_bench_ckpt";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--gb") == 0) gigabytes = std::stod(argv[i + 1]);
    if (std::strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  constexpr int kLayers = 16;
  // Per rank: kLayers shards of three fp32 arrays adding up to its part of `gigabytes`.
  const int64_t per_layer = static_cast<int64_t>(gigabytes * 1e9 / world / kLayers / 12);
  std::vector<std::vector<float>> state(kLayers * 3, std::vector<float>(static_cast<size_t>(per_layer)));
  for (size_t a = 0; a < state.size(); ++a) {
    for (int64_t i = 0; i < per_layer; ++i) state[a][static_cast<size_t>(i)] = static_cast<float>(i % 977) * 1e-3f + static_cast<float>(a);
  }
  std::vector<io::ShardView> views;
  for (int l = 0; l < kLayers; ++l) views.push_back({state[3 * l].data(), state[3 * l + 1].data(), state[3 * l + 2].data(), per_layer, 7});
  nlohmann::json manifest;
  for (int l = 0; l < kLayers; ++l) manifest["layers"].push_back({{"numel", per_layer * world}, {"shard_numel", per_layer}});
  manifest["training"] = {{"step", 1}};
  const std::filesystem::path root = std::filesystem::path(dir) / "checkpoints";
  if (rank == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const double bytes = static_cast<double>(per_layer) * 12 * kLayers * world;

  // Plain: every rank writes its bytes to one file, sequentially, then fsync.
  const std::string plain = dir + "/plain_" + std::to_string(rank) + ".bin";
  std::filesystem::create_directories(dir);
  const double plain_write_s = collective_seconds([&] {
    const int fd = open_or_abort(plain, O_WRONLY | O_CREAT | O_TRUNC);
    for (auto& array : state) transfer_all(fd, reinterpret_cast<char*>(array.data()), array.size() * sizeof(float), true);
    ::fsync(fd);
    ::close(fd);
  });
  io::SaveResult saved;
  const double checkpoint_write_s =
      collective_seconds([&] { saved = io::save_checkpoint(root, 1, views, {}, manifest, 0, MPI_COMM_WORLD); });
  std::string problem;
  const double verify_s = collective_seconds([&] { problem = io::checkpoint_problem(saved.directory, MPI_COMM_WORLD); });
  if (!problem.empty()) {
    std::fprintf(stderr, "verification failed: %s\n", problem.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  std::vector<float> buffer(static_cast<size_t>(per_layer));
  const double plain_read_s = collective_seconds([&] {
    const int fd = open_or_abort(plain, O_RDONLY);
    for (size_t a = 0; a < state.size(); ++a) {
      transfer_all(fd, reinterpret_cast<char*>(buffer.data()), buffer.size() * sizeof(float), false);
    }
    ::close(fd);
  });
  bool equal = true;
  const double checkpoint_read_s = collective_seconds([&] {
    io::CheckpointReader reader(saved.directory);
    for (int l = 0; l < kLayers; ++l) {
      int f = 0;
      for (const char* field : {"master", "exp_avg", "exp_avg_sq"}) {
        reader.read(static_cast<size_t>(l), field, rank * per_layer, per_layer, buffer.data());
        equal = equal && std::memcmp(buffer.data(), state[static_cast<size_t>(3 * l + f)].data(), buffer.size() * 4) == 0;
        ++f;
      }
    }
  });

  if (rank == 0) {
    const double gb = bytes / 1e9;
    std::printf("state: %.2f GB over %d rank(s), %d layers\n", gb, world, kLayers);
    std::printf("write: checkpoint %.2f GB/s (%.2f s, incl. CRC32, fsync, manifest, DONE), plain %.2f GB/s -> ratio %.2f\n",
                gb / checkpoint_write_s, checkpoint_write_s, gb / plain_write_s, plain_write_s / checkpoint_write_s);
    std::printf("verify: %.2f GB/s (CRC32 of every rank file, shared over the ranks)\n", gb / verify_s);
    std::printf("read (warm cache): checkpoint %.2f GB/s (Fletcher32 checked), plain %.2f GB/s -> ratio %.2f; data %s\n",
                gb / checkpoint_read_s, gb / plain_read_s, plain_read_s / checkpoint_read_s, equal ? "identical" : "DIFFERS");
    std::printf("summary: gb=%.2f write_ratio=%.2f read_ratio=%.2f\n", gb, plain_write_s / checkpoint_write_s,
                plain_read_s / checkpoint_read_s);
    std::filesystem::remove_all(dir);
  }
  MPI_Finalize();
  return equal ? 0 : 1;
}
