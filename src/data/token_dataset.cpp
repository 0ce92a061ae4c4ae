// TokenDataset.
#include "data/token_dataset.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "model/labels.hpp"

namespace superoffload::data {

TokenDataset::TokenDataset(TokenArrays arrays, int64_t seq_len, const std::string& source, int64_t vocab_size)
    : arrays_(std::move(arrays)), seq_len_(seq_len) {
  SO_CHECK(seq_len >= 1, "seq_len must be at least 1");
  if (arrays_.row_length > 0) {
    SO_CHECK(arrays_.row_length >= seq_len_ + 1,
             source << ": samples of " << arrays_.row_length << " tokens are shorter than seq_len + 1 = " << seq_len_ + 1
                    << hint("lower [data] seq_len or prepare the data again with this seq_len"));
    samples_ = arrays_.rows();
  } else {
    samples_ = (static_cast<int64_t>(arrays_.tokens.size()) - 1) / seq_len_;
  }
  SO_CHECK(samples_ > 0, source << " holds fewer than seq_len + 1 = " << seq_len_ + 1 << " tokens");
  if (vocab_size > 0) {
    const auto largest = std::max_element(arrays_.tokens.begin(), arrays_.tokens.end());
    SO_CHECK(*largest < vocab_size, source << ": token id " << *largest << " is outside the model's vocabulary of "
                                           << vocab_size << hint("the data was tokenized for another model"));
  }
}

void TokenDataset::sample(int64_t index, int64_t* inputs, int64_t* labels) const {
  const int64_t begin = arrays_.row_length > 0 ? index * arrays_.row_length : index * seq_len_;
  const auto& tokens = arrays_.tokens;
  const auto& mask = arrays_.loss_mask;
  for (int64_t j = 0; j < seq_len_; ++j) {
    const auto next = static_cast<size_t>(begin + j + 1);
    inputs[j] = tokens[next - 1];
    labels[j] = mask.empty() || mask[next] != 0 ? static_cast<int64_t>(tokens[next]) : model::kIgnoreLabel;
  }
}

}  // namespace superoffload::data
