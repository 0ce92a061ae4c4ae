// Training samples over TokenArrays: a stream of documents is cut into samples of
// seq_len + 1 tokens; fixed-length rows are taken one per sample (their first seq_len + 1
// tokens), with `loss_mask` 0 marking tokens that are no target (prompt, padding). A sample
// yields inputs [seq_len] and labels [seq_len] (the next tokens, model::kIgnoreLabel where masked).
// With `documents`, a sample also yields positions that restart at 0 where a document starts
// (`doc_offsets`: a packed instruction sample in a row, a document of the stream), and no
// token predicts the first token of the next document: attention and labels stay within one.
#pragma once

#include <cstdint>
#include <string>

#include "data/token_arrays.hpp"

namespace superoffload::data {

class TokenDataset {
 public:
  // `source` names the data in errors (the file, or the JSONL it was tokenized from).
  // `vocab_size` > 0: every token must be below it.
  TokenDataset(TokenArrays arrays, int64_t seq_len, const std::string& source, int64_t vocab_size = 0,
               bool documents = false);

  int64_t size() const { return samples_; }
  int64_t seq_len() const { return seq_len_; }
  bool documents() const { return documents_; }
  // Fills inputs and labels (each seq_len values) of sample `index`, and with documents() its
  // positions (seq_len values; may be null otherwise).
  void sample(int64_t index, int64_t* inputs, int64_t* labels, int64_t* positions = nullptr) const;

 private:
  TokenArrays arrays_;
  int64_t seq_len_ = 0;
  int64_t samples_ = 0;
  bool documents_ = false;
};

}  // namespace superoffload::data
