// Packed-sample benchmark (not a test): what document-masked attention ([data] attention =
// "document", #35) costs against plain causal attention over the same number of tokens.
//
//   unpacked   each row one sequence: SDPA with is_causal (LibTorch's fused CPU kernel)
//   packed     each row several samples of random lengths (--min-sample .. --max-sample),
//              positions restarting at each: SDPA with the block-causal boolean mask
//
// Both run the ZeRO engine's forward and backward of one micro-batch on the same Llama, the
// same weights and the same tokens, one rank; the optimizer step, the same for both, is left
// out so that the ratio is the attention's alone. Rounds are interleaved (packed first in even
// rounds, unpacked first in odd ones) and the summary is the median over rounds of the ratio
// packed / unpacked within a round.
//
//   build/bin/bench_packed_attention [--layers 4] [--hidden 512] [--micro 4] [--seq 1024]
//       [--min-sample 64] [--max-sample 512] [--rounds 7] [--threads T]
// The last line is `summary: ratio=… packed_s=… unpacked_s=…`.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/allocator.hpp"
#include "base/logging.hpp"
#include "base/timer.hpp"
#include "bench_common.hpp"
#include "cluster/mpi_world.hpp"
#include "comm/mpi_communicator.hpp"
#include "model_io/load_model.hpp"
#include "zero/engine.hpp"

namespace so = superoffload;

namespace {

// Positions of packed rows: samples of random lengths in [low, high] (the last of a row cut
// to fit), each counted from 0. `samples` counts them.
at::Tensor packed_positions(int64_t rows, int64_t seq, int64_t low, int64_t high, at::Generator& generator,
                            int64_t& samples) {
  auto positions = at::empty({rows, seq}, at::kLong);
  auto* p = positions.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t left = 0, position = 0;
    for (int64_t j = 0; j < seq; ++j) {
      if (left == 0) {
        left = at::randint(low, high + 1, {1}, generator, at::kLong).item<int64_t>();
        position = 0;
        ++samples;
      }
      p[r * seq + j] = position++;
      --left;
    }
  }
  return positions;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  so::log::init(so::log::Level::warning);
  std::optional<so::cluster::MpiWorld> world;
  world.emplace(&argc, &argv);
  CLI::App app{"Packed samples: document-masked attention against causal attention over the same tokens"};
  int layers = 4, hidden = 512, micro = 4, seq = 1024, min_sample = 64, max_sample = 512, rounds = 7, threads = 0;
  app.add_option("--layers", layers, "decoder layers")->check(CLI::Range(1, 96));
  app.add_option("--hidden", hidden, "hidden size (heads of 64)")->check(CLI::Range(64, 8192));
  app.add_option("--micro", micro, "rows per micro-batch")->check(CLI::Range(1, 1024));
  app.add_option("--seq", seq, "tokens per row")->check(CLI::Range(2, 1 << 20));
  app.add_option("--min-sample", min_sample, "shortest packed sample")->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-sample", max_sample, "longest packed sample")->check(CLI::Range(1, 1 << 20));
  app.add_option("--rounds", rounds, "interleaved rounds")->check(CLI::Range(1, 1000));
  app.add_option("--threads", threads, "LibTorch threads; 0: all cores");
  CLI11_PARSE(app, argc, argv);
  if (min_sample > max_sample) {
    std::fprintf(stderr, "--min-sample %d exceeds --max-sample %d\n", min_sample, max_sample);
    return 2;
  }
  so::base::configure_host_allocator();
  if (threads <= 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  at::set_num_threads(threads);

  const auto dir = std::filesystem::temp_directory_path() / ("so_bench_packed_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const int64_t vocab = 8192;
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": )" << vocab
                                     << R"(, "hidden_size": )" << hidden << R"(, "intermediate_size": )" << hidden * 8 / 3
                                     << R"(, "num_hidden_layers": )" << layers << R"(, "num_attention_heads": )"
                                     << hidden / 64 << R"(, "num_key_value_heads": )" << std::max(1, hidden / 256)
                                     << R"(, "max_position_embeddings": )" << seq << "}";
  auto loaded = so::model::load_model(dir.string(), "auto", so::config::InitMode::random, 7);
  std::filesystem::remove_all(dir);
  so::comm::MpiCommunicator self(MPI_COMM_SELF);
  so::zero::ZeroEngine engine(loaded.model, self,
                              {.compute_dtype = at::kFloat, .activation_checkpointing = false, .persistence_threshold = 0},
                              loaded.materialize);

  auto generator = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto tokens = at::randint(0, vocab, {micro, seq}, generator, at::kLong);
  int64_t samples = 0;
  const auto positions = packed_positions(micro, seq, min_sample, max_sample, generator, samples);
  const auto labels = so::model::next_token_labels(tokens);
  auto packed_labels = labels.clone();  // a sample's last token predicts nothing
  packed_labels.narrow(1, 0, seq - 1).masked_fill_(positions.narrow(1, 1, seq - 1).eq(0), so::model::kIgnoreLabel);

  std::printf("bench_packed_attention: %s, LibTorch CPU capability %s, %d thread(s)\n", bench::cpu_model().c_str(),
              at::get_cpu_capability().c_str(), threads);
  std::printf("Llama %d layers, hidden %d; %d rows x %d tokens, packed: %lld samples of %d..%d tokens\n", layers, hidden,
              micro, seq, static_cast<long long>(samples), min_sample, max_sample);
  auto time = [&](bool packed) {
    const double start = so::base::now_s();
    engine.forward_backward(tokens, packed ? packed_labels : labels, packed ? positions : at::Tensor(), 1e-3, 0, false);
    return so::base::now_s() - start;
  };
  time(true);  // warm-up: allocations, kernels
  time(false);
  std::vector<double> ratios, packed_s, unpacked_s;
  for (int r = 0; r < rounds; ++r) {
    double p = 0, u = 0;
    if (r % 2 == 0) {
      p = time(true);
      u = time(false);
    } else {
      u = time(false);
      p = time(true);
    }
    packed_s.push_back(p);
    unpacked_s.push_back(u);
    ratios.push_back(p / u);
    std::printf("round %d: packed %.3f s, unpacked %.3f s, ratio %.3f\n", r, p, u, p / u);
  }
  std::printf("summary: ratio=%.3f packed_s=%.3f unpacked_s=%.3f (forward + backward, median of %d rounds)\n",
              bench::median(ratios), bench::median(packed_s), bench::median(unpacked_s), rounds);
  return 0;
}
