// TokenDataset.
#include "data/token_dataset.hpp"

#include "io/hdf5_file.hpp"
#include "runtime/error.hpp"

namespace superoffload::data {

TokenDataset::TokenDataset(const std::string& path, int64_t seq_len) : path_(path), seq_len_(seq_len) {
  SO_CHECK(seq_len >= 1, "seq_len must be at least 1");
  const auto file = io::Hdf5File::open_read(path);
  SO_CHECK(file.has("tokens"), path << " has no dataset \"tokens\""
                                    << hint("prepare the data with superoffload prepare, or see datasets/README.md"));
  auto tokens = file.read_int64("tokens");
  if (tokens.shape.size() == 1) {
    const auto n = static_cast<int64_t>(tokens.shape[0]);
    samples_ = (n - 1) / seq_len_;
    tokens_ = std::move(tokens.values);
  } else {
    SO_CHECK(tokens.shape.size() == 2, path << ": \"tokens\" must be 1-D (a stream) or 2-D (samples)");
    fixed_ = true;
    row_length_ = static_cast<int64_t>(tokens.shape[1]);
    SO_CHECK(row_length_ >= seq_len_ + 1, path << ": samples of " << row_length_ << " tokens are shorter than seq_len + 1 = "
                                                << seq_len_ + 1 << hint("lower [data] seq_len or prepare longer samples"));
    samples_ = static_cast<int64_t>(tokens.shape[0]);
    tokens_ = std::move(tokens.values);
    if (file.has("loss_mask")) {
      auto mask = file.read_int64("loss_mask");
      SO_CHECK(mask.shape == tokens.shape, path << ": \"loss_mask\" must have the shape of \"tokens\"");
      loss_mask_ = std::move(mask.values);
    }
  }
  SO_CHECK(samples_ > 0, path << " holds fewer than seq_len + 1 = " << seq_len_ + 1 << " tokens");
}

void TokenDataset::sample(int64_t index, int64_t* inputs, int64_t* labels) const {
  const int64_t begin = fixed_ ? index * row_length_ : index * seq_len_;
  for (int64_t j = 0; j < seq_len_; ++j) {
    inputs[j] = tokens_[static_cast<size_t>(begin + j)];
    labels[j] = tokens_[static_cast<size_t>(begin + j + 1)];
    if (!loss_mask_.empty() && loss_mask_[static_cast<size_t>(begin + j + 1)] == 0) labels[j] = -100;
  }
}

}  // namespace superoffload::data
