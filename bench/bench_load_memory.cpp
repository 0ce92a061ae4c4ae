// Set-up memory (a benchmark, not a test). Under mpirun: builds a ~107M-parameter Llama
// (408 MiB in fp32) and partitions it, either loading the whole model first ("full") or
// materialising one layer at a time inside the engine ("stream", what `train` does), and
// prints the largest growth of any rank's peak resident memory. Run both modes to compare:
//   mpirun -np 4 build/bin/bench_load_memory full; mpirun -np 4 build/bin/bench_load_memory stream
#include <mpi.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "base/allocator.hpp"
#include "base/logging.hpp"
#include "cluster/mpi_world.hpp"
#include "model_io/load_model.hpp"
#include "zero/communicator_factory.hpp"
#include "zero/engine.hpp"

namespace so = superoffload;

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

int main(int argc, char** argv) {
  so::log::init(so::log::Level::warning);
  so::base::configure_host_allocator();  // as superoffload's main does
  std::optional<so::cluster::MpiWorld> world;
  world.emplace(&argc, &argv);
  const bool stream = argc > 1 && std::string(argv[1]) == "stream";
  const auto dir = std::filesystem::temp_directory_path() / ("so_stream_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 4000,
    "hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 12,
    "num_key_value_heads": 4, "tie_word_embeddings": false})";
  auto comm = so::zero::make_communicator(so::config::CommBackend::automatic, at::kCPU, world->world());
  const double before = peak_rss_mb();
  auto loaded = so::model::load_model(dir.string(), "auto", so::config::InitMode::random, 1, stream);
  const double model_mb = static_cast<double>(loaded.model->shape().total_parameters) * 4 / (1024.0 * 1024.0);
  so::zero::EngineOptions options;
  options.compute_dtype = at::kFloat;
  options.persistence_threshold = 0;
  so::zero::ZeroEngine engine(loaded.model, *comm, options, loaded.materialize);
  const double grown = peak_rss_mb() - before;
  if (world->rank() == 0) {
    std::ifstream statm("/proc/self/statm");
    long pages = 0, resident = 0;
    statm >> pages >> resident;
    std::printf("rank 0 resident after set-up: %.0f MB (shards and gradient shards included)\n",
                resident * 4096.0 / (1024 * 1024));
  }
  double worst = grown;
  MPI_Allreduce(&grown, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (world->rank() == 0) {
    std::printf("mode=%s ranks=%d model_mb=%.0f peak_growth_mb=%.0f\n", stream ? "stream" : "full", world->size(),
                model_mb, worst);
  }
  std::filesystem::remove_all(dir);
  world.reset();
  return 0;
}
