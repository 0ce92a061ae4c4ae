// Checkpoint write, read and verification bandwidth for an optimizer state of ~1 GB (fp32
// master + two moments), against plain sequential I/O of the same bytes to the same disk in
// the same run:
//   write   save_checkpoint (rank files, fsync, read-back check, manifest, DONE, latest)
//           against write() + fsync of one file per rank;
//   read    what a resume does (the structure check, then every rank's shards read and
//           checked against their CRC32Cs) against read() of that file, with a warm page
//           cache and a cold one (dropped with /proc/sys/vm/drop_caches before each read; a
//           run that may not drop it says so and measures warm only). Both read into
//           arrays the size of the state, one per dataset, as a resume reads into the
//           optimizer's tensors; --into buffer reads every dataset into one reused buffer
//           instead (the figures of earlier sessions), which flatters the plain read: a
//           buffer smaller than the last-level cache takes the copies without going to memory;
//   verify  what `inspect` does: every rank file's whole-file CRC32C, in GB/s per rank.
// Rounds are interleaved, plain first in even rounds and the checkpoint first in odd ones,
// and each ratio is the median of the rounds' ratios (run an even number of rounds). Prints
// the CPU model and how reads are checksummed; the last lines are
//   summary: ranks=N cache=warm|cold write_ratio=… read_ratio=… verify_gb_s_per_rank=…
//
//   mpirun -np 1|2 build/bin/bench_checkpoint [--gb 1] [--rounds 4] [--dir /tmp/so_bench_ckpt] [--threads T]
//                                             [--into state|buffer] [--verbose]
//   (--threads: the reader's threads per rank; default the CPUs the rank may run on)
#include <fcntl.h>
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "base/timer.hpp"
#include "io/checkpoint_files.hpp"
#include "io/checkpoint_reader.hpp"
#include "io/checkpoint_writer.hpp"
#include "io/crc32c.hpp"

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

// Empties the page cache of this node (one rank per node does it; the bench runs on one
// node). False when not permitted.
bool drop_page_cache(int rank) {
  int ok = 1;
  if (rank == 0) {
    ::sync();
    std::ofstream control("/proc/sys/vm/drop_caches");
    control << "3\n";
    control.flush();
    ok = control ? 1 : 0;
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return ok == 1;
}

struct Rounds {
  std::vector<double> plain_s, checkpoint_s;
  double median_ratio() const {  // plain time / checkpoint time: 1 is plain speed
    std::vector<double> ratios;
    for (size_t i = 0; i < plain_s.size(); ++i) ratios.push_back(plain_s[i] / checkpoint_s[i]);
    return bench::median(ratios);
  }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  double gigabytes = 1.0;
  int rounds = 4;
  bool verbose = false;
  std::string dir = "/tmp/so_bench_ckpt", into = "state";
  int threads_asked = 0;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--verbose") == 0) {
      verbose = true;
    } else if (has_value && std::strcmp(argv[i], "--gb") == 0) {
      gigabytes = std::stod(argv[++i]);
    } else if (has_value && std::strcmp(argv[i], "--rounds") == 0) {
      rounds = std::stoi(argv[++i]);
    } else if (has_value && std::strcmp(argv[i], "--dir") == 0) {
      dir = argv[++i];
    } else if (has_value && std::strcmp(argv[i], "--threads") == 0) {
      threads_asked = std::stoi(argv[++i]);
    } else if (has_value && std::strcmp(argv[i], "--into") == 0 &&
               (std::strcmp(argv[i + 1], "state") == 0 || std::strcmp(argv[i + 1], "buffer") == 0)) {
      into = argv[++i];
    } else {
      std::fprintf(stderr, "bench_checkpoint: unknown or incomplete argument %s (see the header of bench_checkpoint.cpp)\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
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
  std::filesystem::create_directories(dir);
  const double gb = static_cast<double>(per_layer) * 12 * kLayers * world / 1e9;
  const bool can_drop = drop_page_cache(rank);
  // The reader may use the cores this rank may run on, as `train` gives it its compute threads.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  int threads = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
  if (threads_asked > 0) threads = threads_asked;

  const std::string plain = dir + "/plain_" + std::to_string(rank) + ".bin";
  // Where the reads go: array a of `restored`, or the one buffer for all of them.
  std::vector<std::vector<float>> restored(into == "state" ? state.size() : 1, std::vector<float>(static_cast<size_t>(per_layer)));
  auto destination = [&](size_t a) { return restored[into == "state" ? a : 0].data(); };
  auto plain_read = [&] {
    const int fd = open_or_abort(plain, O_RDONLY);
    for (size_t a = 0; a < state.size(); ++a) {
      transfer_all(fd, reinterpret_cast<char*>(destination(a)), static_cast<size_t>(per_layer) * sizeof(float), false);
    }
    ::close(fd);
  };
  std::filesystem::path saved;
  auto checkpoint_read = [&] {  // as a resume reads: the structure check, then checked reads
    const auto problem = io::checkpoint_problem(saved, MPI_COMM_WORLD, io::Verify::structure);
    if (!problem.empty()) {
      std::fprintf(stderr, "the checkpoint is broken: %s\n", problem.c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    io::CheckpointReader reader(saved, threads);
    for (int l = 0; l < kLayers; ++l) {
      size_t a = 3 * static_cast<size_t>(l);
      for (const char* field : {"master", "exp_avg", "exp_avg_sq"}) {
        reader.read(static_cast<size_t>(l), field, rank * per_layer, per_layer, destination(a++));
      }
    }
  };

  Rounds write, warm_read, cold_read;
  std::vector<double> warm_verify_s, cold_verify_s;
  auto plain_write = [&] {
    const int fd = open_or_abort(plain, O_WRONLY | O_CREAT | O_TRUNC);
    for (auto& array : state) transfer_all(fd, reinterpret_cast<char*>(array.data()), array.size() * sizeof(float), true);
    ::fsync(fd);
    ::close(fd);
  };
  auto verify = [&] {
    const auto problem = io::checkpoint_problem(saved, MPI_COMM_WORLD, io::Verify::everything);
    if (!problem.empty()) MPI_Abort(MPI_COMM_WORLD, 1);
  };
  for (int r = 0; r < rounds; ++r) {
    // The previous round's checkpoint goes now, before the plain file is rewritten, so that
    // freeing both (on a file system mounted with `discard`, trimming both) happens before
    // the timed writes, not during the next reads.
    if (rank == 0 && !saved.empty()) std::filesystem::remove_all(saved);
    // Plain first in even rounds, the checkpoint first in odd ones: on a shared virtual disk
    // whichever went second was slower (cold reads: ratio 0.78 with plain always first,
    // 1.08 with the checkpoint always first, 4 GB at 2 ranks), so the order alternates and
    // the median spans both.
    const bool plain_first = r % 2 == 0;
    auto pair = [&](Rounds& times, auto&& plain_work, auto&& checkpoint_work, bool cold) {
      for (int turn = 0; turn < 2; ++turn) {
        if (cold) drop_page_cache(rank);
        if ((turn == 0) == plain_first) {
          times.plain_s.push_back(collective_seconds(plain_work));
        } else {
          times.checkpoint_s.push_back(collective_seconds(checkpoint_work));
        }
      }
    };
    pair(write, plain_write, [&] {
      saved = io::save_checkpoint(root, r + 1, io::shard_source(views), io::RankBlobs{}, manifest, 0, MPI_COMM_WORLD).directory;
    }, false);
    pair(warm_read, plain_read, checkpoint_read, false);
    warm_verify_s.push_back(collective_seconds(verify));
    if (can_drop) {
      pair(cold_read, plain_read, checkpoint_read, true);
      drop_page_cache(rank);
      cold_verify_s.push_back(collective_seconds(verify));
    }
    if (verbose && rank == 0) {
      std::printf("round %d: write %.2f/%.2f s, warm read %.3f/%.3f s", r, write.plain_s.back(), write.checkpoint_s.back(),
                  warm_read.plain_s.back(), warm_read.checkpoint_s.back());
      if (can_drop) std::printf(", cold read %.3f/%.3f s", cold_read.plain_s.back(), cold_read.checkpoint_s.back());
      std::printf(" (plain/checkpoint, %s first)\n", plain_first ? "plain" : "checkpoint");
    }
  }
  // The data read back is the data written (outside the timed reads).
  bool equal = true;
  {
    std::vector<float> buffer(static_cast<size_t>(per_layer));
    io::CheckpointReader reader(saved);
    for (int l = 0; l < kLayers; ++l) {
      int f = 0;
      for (const char* field : {"master", "exp_avg", "exp_avg_sq"}) {
        reader.read(static_cast<size_t>(l), field, rank * per_layer, per_layer, buffer.data());
        equal = equal && std::memcmp(buffer.data(), state[static_cast<size_t>(3 * l + f)].data(), buffer.size() * 4) == 0;
        ++f;
      }
    }
  }
  int all_equal = equal ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all_equal, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);

  if (rank == 0) {
    const double per_rank = gb / world;
    std::printf("cpu: %s; CRC32C by ISA-L, reads from the page cache by %s\n", bench::cpu_model().c_str(),
                io::crc32c_copy_method());
    std::printf("state: %.2f GB over %d rank(s), %d layers, in %s; %d rounds, medians; reader threads per rank: %d; "
                "reads into %s\n",
                gb, world, kLayers, dir.c_str(), rounds, threads,
                into == "state" ? "arrays the size of the state" : "one reused buffer");
    auto rates = [&](const char* what, const Rounds& rounds_of) {
      const double plain_s = bench::median(rounds_of.plain_s), checkpoint_s = bench::median(rounds_of.checkpoint_s);
      std::printf("%-12s checkpoint %6.2f GB/s (%.2f s), plain %6.2f GB/s (%.2f s) -> ratio %.2f\n", what, gb / checkpoint_s,
                  checkpoint_s, gb / plain_s, plain_s, rounds_of.median_ratio());
    };
    rates("write", write);
    rates("read warm", warm_read);
    if (can_drop) rates("read cold", cold_read);
    std::printf("verify       warm %.2f GB/s per rank", per_rank / bench::median(warm_verify_s));
    if (can_drop) std::printf(", cold %.2f GB/s per rank", per_rank / bench::median(cold_verify_s));
    std::printf(" (whole-file CRC32C of every rank file, as inspect)\n");
    if (!can_drop) std::printf("cold cache: not measured, /proc/sys/vm/drop_caches is not writable here (needs root)\n");
    std::printf("data read back: %s\n", all_equal ? "identical" : "DIFFERS");
    std::printf("summary: ranks=%d cache=warm write_ratio=%.2f read_ratio=%.2f verify_gb_s_per_rank=%.2f\n", world,
                write.median_ratio(), warm_read.median_ratio(), per_rank / bench::median(warm_verify_s));
    if (can_drop) {
      std::printf("summary: ranks=%d cache=cold write_ratio=%.2f read_ratio=%.2f verify_gb_s_per_rank=%.2f\n", world,
                  write.median_ratio(), cold_read.median_ratio(), per_rank / bench::median(cold_verify_s));
    }
    std::filesystem::remove_all(dir);
  }
  MPI_Finalize();
  return all_equal ? 0 : 1;
}
