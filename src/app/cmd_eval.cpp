// `superoffload eval --model HF_DIR --tokens FILE [--dump-logits OUT.h5]`: mean loss and
// perplexity of a model over token sequences, on rank 0 (train/evaluate.hpp).
#include <cmath>
#include <iostream>

#include "app/commands.hpp"
#include "cluster/mpi_world.hpp"
#include "train/evaluate.hpp"

namespace superoffload::app {
namespace {

int run_eval(const cluster::MpiWorld& world, const train::EvalRequest& request) {
  bind_and_report(world, "auto");
  if (world.rank() != 0) return 0;  // one process evaluates; the others only share the start-up
  const auto r = train::evaluate(request);
  std::cout.precision(9);
  std::cout << "eval: " << r.sequences << " sequence(s) x " << r.seq_len << " tokens, " << r.predicted_tokens
            << " predicted tokens\n"
            << "mean loss " << r.mean_loss << "\nperplexity " << std::exp(r.mean_loss) << "\n";
  if (r.aux_loss != 0) {
    std::cout << "aux loss " << r.aux_loss
              << " (router load balancing as HF's aux_loss, unweighted; training adds router_aux_loss_coef x it)\n";
  }
  if (!request.dump_logits.empty()) std::cout << "logits and per-token loss written to " << request.dump_logits << "\n";
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, const GlobalOptions& /*globals*/, Run& run) {
  auto options = std::make_shared<train::EvalRequest>();
  auto* eval = app.add_subcommand("eval", "Mean loss and perplexity of a HuggingFace model on token sequences");
  eval->add_option("--model", options->model, "HuggingFace model directory")->required()->check(CLI::ExistingDirectory);
  eval->add_option("--tokens", options->tokens, "HDF5 file with an int64 [batch, seq] dataset `tokens` (and, for packed samples, "
                 "`position_ids` restarting at 0 at each)")
      ->required()
      ->check(CLI::ExistingFile);
  eval->add_option("--dump-logits", options->dump_logits,
                   "Write fp32 logits [batch, seq, vocab] and per-token loss to this HDF5 file");
  eval->add_option("--plugin", options->plugin, "Plugin: auto (from config.json), a name, or a .so path");
  eval->callback([&run, options] { run = [options](const cluster::MpiWorld& world) { return run_eval(world, *options); }; });
}

}  // namespace superoffload::app
