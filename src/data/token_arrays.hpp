// Training tokens in memory, in the layout of the pre-tokenized HDF5 file that
// `superoffload prepare` writes and `train` reads: one stream of documents (`tokens`,
// `doc_offsets`) or fixed-length rows (`tokens [N, L]`, `loss_mask [N, L]`, `doc_offsets`).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace superoffload::data {

struct TokenArrays {
  int64_t row_length = 0;            // 0: one stream of documents; else rows of this many tokens
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> loss_mask;    // rows only; empty: every token counts
  // Where each document starts, as an index into `tokens`: in a stream, each document; in rows,
  // each instruction sample (several per row when packed). Empty in files from before rows had
  // it: every row is one document.
  std::vector<int64_t> doc_offsets;

  int64_t rows() const { return row_length > 0 ? static_cast<int64_t>(tokens.size()) / row_length : 0; }
};

// Reads `tokens` (uint32 or any integer type), `loss_mask` and `doc_offsets`; throws naming
// the file and dataset when the layout is wrong.
TokenArrays read_token_file(const std::string& path);
// Writes the datasets (chunked, Fletcher32-checksummed) and `attributes` as string attributes.
void write_token_file(const std::string& path, const TokenArrays& arrays,
                      const std::map<std::string, std::string>& attributes);

}  // namespace superoffload::data
