// Pre-tokenized training data in HDF5: either a 1-D `tokens` stream (uint32, documents
// joined, optional `doc_offsets`) cut into samples of seq_len + 1 tokens, or 2-D fixed-length
// samples `tokens [N, seq_len + 1]` with an optional `loss_mask` of the same shape (0 = no
// loss, e.g. prompt or padding). A sample yields inputs [seq_len] and labels [seq_len]
// (the next tokens, -100 where masked).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace superoffload::data {

class TokenDataset {
 public:
  // Reads the whole dataset into memory (the demo and test sets are small; large sets will
  // be read by slices). Throws naming the file and dataset on bad input.
  TokenDataset(const std::string& path, int64_t seq_len);

  int64_t size() const { return samples_; }
  int64_t seq_len() const { return seq_len_; }
  // Fills inputs and labels (each seq_len values) of sample `index`.
  void sample(int64_t index, int64_t* inputs, int64_t* labels) const;

 private:
  std::string path_;
  int64_t seq_len_ = 0;
  int64_t samples_ = 0;
  bool fixed_ = false;               // 2-D samples
  int64_t row_length_ = 0;           // 2-D: tokens per stored row
  std::vector<int64_t> tokens_;
  std::vector<int64_t> loss_mask_;   // 2-D only, may be empty
};

}  // namespace superoffload::data
