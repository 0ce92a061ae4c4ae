// TokenDataset.
#include "data/token_dataset.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "model/labels.hpp"

namespace superoffload::data {

TokenDataset::TokenDataset(TokenArrays arrays, int64_t seq_len, const std::string& source, int64_t vocab_size,
                           bool documents)
    : arrays_(std::move(arrays)), seq_len_(seq_len), documents_(documents) {
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
    const auto bad = std::find_if(arrays_.tokens.begin(), arrays_.tokens.end(),
                                  [&](uint32_t id) { return static_cast<int64_t>(id) >= vocab_size; });
    if (bad != arrays_.tokens.end()) {
      const auto index = bad - arrays_.tokens.begin();
      std::string where = "element " + std::to_string(index);
      if (arrays_.row_length > 0) {
        where += " (sample " + std::to_string(index / arrays_.row_length) + ", position " +
                 std::to_string(index % arrays_.row_length) + ")";
      }
      SO_FAIL(source << ": token " << where << " is id " << *bad << ", outside the model's vocabulary of " << vocab_size
                     << " (ids lie in [0, " << vocab_size << "))"
                     << hint("the data was tokenized for another model, or the tokenizer has more tokens than "
                             "config.json's vocab_size"));
    }
  }
}

void TokenDataset::sample(int64_t index, int64_t* inputs, int64_t* labels, int64_t* positions) const {
  const int64_t begin = arrays_.row_length > 0 ? index * arrays_.row_length : index * seq_len_;
  const auto& tokens = arrays_.tokens;
  const auto& mask = arrays_.loss_mask;
  for (int64_t j = 0; j < seq_len_; ++j) {
    const auto next = static_cast<size_t>(begin + j + 1);
    inputs[j] = tokens[next - 1];
    labels[j] = mask.empty() || mask[next] != 0 ? static_cast<int64_t>(tokens[next]) : model::kIgnoreLabel;
  }
  if (!documents_) return;
  SO_CHECK(positions != nullptr, "TokenDataset::sample: positions are needed with documents");
  // Document starts ascend: one binary search finds the first after the sample's first token
  // (which is at position 0 whether or not a document starts there).
  const auto& starts = arrays_.doc_offsets;
  auto next_start = std::upper_bound(starts.begin(), starts.end(), begin);
  positions[0] = 0;
  for (int64_t j = 0; j < seq_len_; ++j) {
    if (next_start == starts.end() || *next_start != begin + j + 1) {
      if (j + 1 < seq_len_) positions[j + 1] = positions[j] + 1;
      continue;
    }
    labels[j] = model::kIgnoreLabel;  // the next token opens another document
    if (j + 1 < seq_len_) positions[j + 1] = 0;
    ++next_start;
  }
}

}  // namespace superoffload::data
