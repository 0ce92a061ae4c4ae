// Validation.
#include "train/validation.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <sstream>

#include "base/error.hpp"
#include "base/timer.hpp"
#include "cluster/check_mpi.hpp"
#include "cluster/mpi_world.hpp"
#include "model/causal_lm.hpp"
#include "zero/engine.hpp"

namespace superoffload::train {

Validation::Validation(const data::TokenDataset& dataset, std::vector<int64_t> indices, int64_t batch,
                       int64_t max_batches, const cluster::MpiWorld& world, int replicas, std::string source)
    : dataset_(dataset), indices_(std::move(indices)), batch_(batch), world_(world), replicas_(replicas) {
  SO_CHECK(batch_ >= 1, "per_device_eval_batch_size must be at least 1");
  const int64_t available = static_cast<int64_t>(indices_.size());
  if (max_batches > 0 && max_batches * batch_ < available) indices_.resize(static_cast<size_t>(max_batches * batch_));
  const int64_t needed = batch_ * replicas_;
  if (samples() < needed) {
    std::ostringstream message;
    message << "the validation data " << source << " has " << available << " sample(s) of " << dataset_.seq_len()
            << " tokens" << (samples() < available ? " (" + std::to_string(samples()) + " within [training] eval_max_batches)"
                                                   : std::string())
            << ", fewer than one batch per " << (replicas_ == world_.size() ? "rank" : "data-parallel replica")
            << ": " << batch_ << " ([training] per_device_eval_batch_size) x " << replicas_
            << (replicas_ == world_.size() ? " rank(s)" : " replicas (world / [parallel] sequence_parallel_size)")
            << " = " << needed;
    throw Error(message.str(),
                std::string("give more validation data (a larger [data] eval_fraction, or a larger eval_path), or lower "
                            "[training] per_device_eval_batch_size") +
                    (samples() < available ? ", or raise eval_max_batches" : ""),
                Error::UserInput{});
  }
}

ValidationResult Validation::evaluate(zero::ZeroEngine& engine, const std::function<void(const std::string&)>& progress) const {
  torch::NoGradGuard no_grad;
  const double start_s = base::now_s();
  const int64_t seq = dataset_.seq_len(), n = samples(), total = batches();
  SO_CHECK(engine.data_parallel_size() == replicas_,
           "validation was set up for " << replicas_ << " replicas, the engine has " << engine.data_parallel_size());
  const int replica = engine.data_parallel_rank();
  const int64_t rounds = (total + replicas_ - 1) / replicas_;
  // [loss sums of every batch, token counts of every batch]: each replica fills its own.
  std::vector<double> sums(static_cast<size_t>(2 * total), 0.0);
  const auto device = engine.device();
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t b = round * replicas_ + replica;  // this replica's batch; past the last: predicts nothing
    if (progress) progress("evaluating: round " + std::to_string(round + 1) + " of " + std::to_string(rounds));
    auto tokens = at::zeros({batch_, seq}, at::kLong);
    auto labels = at::full({batch_, seq}, model::kIgnoreLabel, at::kLong);
    // Positions 0, 1, ... where no sample fills the row (a short last batch, or none).
    auto positions = dataset_.documents() ? at::arange(seq, at::kLong).repeat({batch_, 1}) : at::Tensor();
    for (int64_t i = 0; i < batch_; ++i) {
      const int64_t sample = b * batch_ + i;
      if (b >= total || sample >= n) break;
      dataset_.sample(indices_[static_cast<size_t>(sample)], tokens[i].data_ptr<int64_t>(), labels[i].data_ptr<int64_t>(),
                      positions.defined() ? positions[i].data_ptr<int64_t>() : nullptr);
    }
    const auto result = engine.forward_loss(tokens.to(device), labels.to(device),
                                            positions.defined() ? positions.to(device) : positions);
    if (b < total) {
      sums[static_cast<size_t>(b)] = result.loss_sum;
      sums[static_cast<size_t>(total + b)] = static_cast<double>(result.tokens);
    }
  }
  // Every entry is one replica's value plus zeros (under sequence parallelism the sum of its
  // ranks' shards): the same sums in the same order at any number of replicas.
  SO_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_DOUBLE, MPI_SUM, world_.world()));
  double loss_sum = 0, tokens = 0;
  for (int64_t b = 0; b < total; ++b) {
    loss_sum += sums[static_cast<size_t>(b)];
    tokens += sums[static_cast<size_t>(total + b)];
  }
  return {.loss = tokens > 0 ? loss_sum / tokens : std::nan(""),
          .tokens = static_cast<int64_t>(tokens),
          .samples = n,
          .seconds = base::now_s() - start_s};
}

}  // namespace superoffload::train
