// `superoffload eval --model HF_DIR --tokens FILE [--dump-logits OUT.h5]`: mean loss and
// perplexity of a model over token sequences, computed in fp32 on rank 0 by the ZeRO-3
// engine training uses (one rank: layer by layer, the same forward and chunked loss).
#include <torch/autograd.h>

#include <cmath>
#include <iostream>

#include "app/commands.hpp"
#include "base/error.hpp"
#include "cluster/mpi_world.hpp"
#include "comm/mpi_communicator.hpp"
#include "io/hdf5_file.hpp"
#include "model_io/load_model.hpp"
#include "zero/engine.hpp"

namespace superoffload::app {
namespace {

struct EvalOptions {
  std::string model, tokens, dump_logits, plugin = "auto";
};

int run_eval(const runtime::MpiWorld& world, const EvalOptions& options) {
  bind_and_report(world, "auto");
  if (world.rank() != 0) return 0;  // one process evaluates; the others only share the start-up
  torch::NoGradGuard no_grad;
  auto loaded = model::load_model(options.model, options.plugin, config::InitMode::pretrained, 0, /*defer=*/true);

  const auto file = io::Hdf5File::open_read(options.tokens);
  const auto tokens_array = file.read_int64("tokens");
  SO_CHECK(tokens_array.shape.size() == 2 && tokens_array.shape[1] >= 2,
           options.tokens << ": dataset \"tokens\" must be 2-D [batch, seq] with seq >= 2");
  const int64_t batch = static_cast<int64_t>(tokens_array.shape[0]), seq = static_cast<int64_t>(tokens_array.shape[1]);
  const auto vocab = loaded.model->shape().vocab_size;
  const auto tokens = at::from_blob(const_cast<int64_t*>(tokens_array.values.data()), {batch, seq}, at::kLong).clone();
  SO_CHECK(tokens.min().item<int64_t>() >= 0 && tokens.max().item<int64_t>() < vocab,
           options.tokens << ": token ids must lie in [0, " << vocab << ") for this model");
  const auto labels = model::next_token_labels(tokens);

  // This rank alone: the engine holds the model as one shard and gathers a layer at a time.
  comm::MpiCommunicator self(MPI_COMM_SELF);
  zero::ZeroEngine engine(loaded.model, self,
                          {.compute_dtype = at::kFloat,
                           .activation_checkpointing = false,
                           .persistence_threshold = 0,
                           .loss_chunk_tokens = 512},
                          loaded.materialize);
  const auto total = engine.forward_loss(tokens, labels);
  const double mean = total.loss_sum / static_cast<double>(total.tokens);
  std::cout.precision(9);
  std::cout << "eval: " << batch << " sequence(s) x " << seq << " tokens, " << total.tokens << " predicted tokens\n"
            << "mean loss " << mean << "\nperplexity " << std::exp(mean) << "\n";
  if (loaded.model->is_moe() && total.aux_loss != 0) {
    std::cout << "aux loss " << total.aux_loss << " (router load balancing, weighted by router_aux_loss_coef)\n";
  }

  if (!options.dump_logits.empty()) {
    const auto logits = engine.forward_logits(tokens).contiguous();
    const auto per_token = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}), {},
                                                  at::Reduction::None, model::kIgnoreLabel)
                               .reshape({batch, seq})
                               .contiguous();
    auto out = io::Hdf5File::create(options.dump_logits);
    out.write_float("logits", {static_cast<hsize_t>(batch), static_cast<hsize_t>(seq), static_cast<hsize_t>(logits.size(-1))},
                    logits.data_ptr<float>());
    // The last position has no next token: its loss is 0 and `loss_mask` is 0 there.
    out.write_float("loss", {static_cast<hsize_t>(batch), static_cast<hsize_t>(seq)}, per_token.data_ptr<float>());
    const auto mask = labels.ne(model::kIgnoreLabel).to(at::kLong).contiguous();
    out.write_int64("loss_mask", {static_cast<hsize_t>(batch), static_cast<hsize_t>(seq)}, mask.data_ptr<int64_t>());
    std::cout << "logits and per-token loss written to " << options.dump_logits << "\n";
  }
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, const GlobalOptions& /*globals*/, Run& run) {
  auto options = std::make_shared<EvalOptions>();
  auto* eval = app.add_subcommand("eval", "Mean loss and perplexity of a HuggingFace model on token sequences");
  eval->add_option("--model", options->model, "HuggingFace model directory")->required()->check(CLI::ExistingDirectory);
  eval->add_option("--tokens", options->tokens, "HDF5 file with an int64 [batch, seq] dataset `tokens`")
      ->required()
      ->check(CLI::ExistingFile);
  eval->add_option("--dump-logits", options->dump_logits,
                   "Write fp32 logits [batch, seq, vocab] and per-token loss to this HDF5 file");
  eval->add_option("--plugin", options->plugin, "Plugin: auto (from config.json), a name, or a .so path");
  eval->callback([&run, options] { run = [options](const runtime::MpiWorld& world) { return run_eval(world, *options); }; });
}

}  // namespace superoffload::app
