// Training samples over TokenArrays: a stream of documents is cut into samples of
// seq_len + 1 tokens; fixed-length rows are taken one per sample (their first seq_len + 1
// tokens), with `loss_mask` 0 marking tokens that are no target (prompt, padding). A sample
// yields inputs [seq_len] and labels [seq_len] (the next tokens, model::kIgnoreLabel where masked).
#pragma once

#include <cstdint>
#include <string>

#include "data/token_arrays.hpp"

namespace superoffload::data {

class TokenDataset {
 public:
  // `source` names the data in errors (the file, or the JSONL it was tokenized from).
  // `vocab_size` > 0: every token must be below it.
  TokenDataset(TokenArrays arrays, int64_t seq_len, const std::string& source, int64_t vocab_size = 0);

  int64_t size() const { return samples_; }
  int64_t seq_len() const { return seq_len_; }
  // Fills inputs and labels (each seq_len values) of sample `index`.
  void sample(int64_t index, int64_t* inputs, int64_t* labels) const;

 private:
  TokenArrays arrays_;
  int64_t seq_len_ = 0;
  int64_t samples_ = 0;
};

}  // namespace superoffload::data
