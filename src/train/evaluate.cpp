// evaluate.
#include "train/evaluate.hpp"

#include <mpi.h>
#include <torch/autograd.h>

#include "base/error.hpp"
#include "comm/mpi_communicator.hpp"
#include "io/hdf5_file.hpp"
#include "model_io/load_model.hpp"
#include "train/command_memory.hpp"
#include "train/memory_plan.hpp"
#include "train/weights_by_shard.hpp"
#include "zero/engine.hpp"

namespace superoffload::train {

EvalResult evaluate(const EvalRequest& request) {
  torch::NoGradGuard no_grad;
  auto loaded = model::load_model(request.model, request.plugin, config::InitMode::pretrained, 0, /*defer=*/true);

  const auto file = io::Hdf5File::open_read(request.tokens);
  const auto tokens_array = file.read_int64("tokens");
  SO_CHECK(tokens_array.shape.size() == 2 && tokens_array.shape[0] >= 1 && tokens_array.shape[1] >= 2,
           request.tokens << ": dataset \"tokens\" must be 2-D [batch, seq] with batch >= 1 and seq >= 2");
  const int64_t batch = static_cast<int64_t>(tokens_array.shape[0]), seq = static_cast<int64_t>(tokens_array.shape[1]);
  const auto vocab = loaded.model->shape().vocab_size;
  const auto tokens = at::from_blob(const_cast<int64_t*>(tokens_array.values.data()), {batch, seq}, at::kLong).clone();
  SO_CHECK(tokens.min().item<int64_t>() >= 0 && tokens.max().item<int64_t>() < vocab,
           request.tokens << ": token ids must lie in [0, " << vocab << ") for this model");
  auto labels = model::next_token_labels(tokens);
  // Optional `position_ids` [batch, seq] (HF's padding-free packing): each packed sample starts
  // at 0, attends only to itself, and its last token predicts nothing.
  at::Tensor positions;
  if (file.has("position_ids")) {
    const auto array = file.read_int64("position_ids");
    SO_CHECK(array.shape == tokens_array.shape,
             request.tokens << ": dataset \"position_ids\" must have the shape of \"tokens\" [" << batch << ", " << seq << "]");
    positions = at::from_blob(const_cast<int64_t*>(array.values.data()), {batch, seq}, at::kLong).clone();
    const auto steps = positions.narrow(1, 1, seq - 1) - positions.narrow(1, 0, seq - 1);
    SO_CHECK(positions.select(1, 0).eq(0).all().item<bool>() &&
                 steps.eq(1).logical_or(positions.narrow(1, 1, seq - 1).eq(0)).all().item<bool>(),
             request.tokens << ": dataset \"position_ids\" must start every row at 0 and either rise by 1 or restart at 0"
                            << hint("write 0, 1, 2, ... for each packed sample"));
    labels.narrow(1, 0, seq - 1).masked_fill_(positions.narrow(1, 1, seq - 1).eq(0), model::kIgnoreLabel);
  }

  // Planned and checked before the engine allocates the model; set beside the peak at the end.
  const auto shape = loaded.model->shape();
  EvalShape eval_shape{.parameters = shape.total_parameters, .hidden = shape.hidden_size, .intermediate = 0, .vocab = vocab};
  try {
    eval_shape.intermediate = model_size_from_config(request.model).intermediate;
  } catch (const std::exception&) {  // an architecture the plan's parser does not know: Llama's ratio
    eval_shape.intermediate = 4 * shape.hidden_size;
  }
  constexpr int64_t kLossChunkTokens = 512;
  const auto plan = plan_eval_memory(eval_shape, batch, seq, kLossChunkTokens, !request.dump_logits.empty());
  check_command_memory(plan, 1);
  // This process alone: the engine holds the model as one shard and gathers a layer at a time.
  comm::MpiCommunicator self(MPI_COMM_SELF);
  zero::ZeroEngine engine(loaded.model, self,
                          {.compute_dtype = at::kFloat,
                           .activation_checkpointing = false,
                           .persistence_threshold = 0,
                           .loss_chunk_tokens = kLossChunkTokens},
                          loaded.fill_ranges ? nullptr : loaded.materialize, shard_filler(loaded));
  const auto total = engine.forward_loss(tokens, labels, positions);
  EvalResult result{.sequences = batch,
                    .seq_len = seq,
                    .predicted_tokens = total.tokens,
                    .mean_loss = total.loss_sum / static_cast<double>(total.tokens),
                    .aux_loss = total.aux_loss};

  if (!request.dump_logits.empty()) {
    const auto logits = engine.forward_logits(tokens, positions).contiguous();
    const auto per_token = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}), {},
                                                  at::Reduction::None, model::kIgnoreLabel)
                               .reshape({batch, seq})
                               .contiguous();
    auto out = io::Hdf5File::create(request.dump_logits);
    out.write_float("logits", {static_cast<hsize_t>(batch), static_cast<hsize_t>(seq), static_cast<hsize_t>(logits.size(-1))},
                    logits.data_ptr<float>());
    // The last position has no next token: its loss is 0 and `loss_mask` is 0 there.
    out.write_float("loss", {static_cast<hsize_t>(batch), static_cast<hsize_t>(seq)}, per_token.data_ptr<float>());
    const auto mask = labels.ne(model::kIgnoreLabel).to(at::kLong).contiguous();
    out.write_int64("loss_mask", {static_cast<hsize_t>(batch), static_cast<hsize_t>(seq)}, mask.data_ptr<int64_t>());
  }
  log_command_memory(plan);
  return result;
}

}  // namespace superoffload::train
