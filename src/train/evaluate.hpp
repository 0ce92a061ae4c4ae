// `superoffload eval`'s work: mean loss (and perplexity) of a HF model over token sequences,
// computed in fp32 on this process alone by the ZeRO-3 engine training uses (one rank: layer
// by layer, the same forward and chunked loss), optionally with the logits written out.
#pragma once

#include <cstdint>
#include <string>

namespace superoffload::train {

struct EvalRequest {
  std::string model;        // HF model directory (pretrained weights required)
  std::string plugin = "auto";
  std::string tokens;       // HDF5 file with an int64 [batch, seq] dataset "tokens"
  std::string dump_logits;  // "" or an HDF5 file for fp32 logits, per-token loss and loss_mask
};

struct EvalResult {
  int64_t sequences = 0, seq_len = 0, predicted_tokens = 0;
  double mean_loss = 0;
  double aux_loss = 0;  // MoE router load balancing, HF's aux_loss (unweighted), 0 when off
};

EvalResult evaluate(const EvalRequest& request);

}  // namespace superoffload::train
