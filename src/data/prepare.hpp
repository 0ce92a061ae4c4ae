// JSONL to training tokens, the work split over MPI ranks: each rank tokenizes the records of
// its byte range of the file, the pieces are gathered in file order, and documents are joined
// into a stream (text) or instruction samples padded or packed into rows of seq_len + 1
// (alpaca). The result does not depend on the number of ranks.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "config/config.hpp"
#include "data/record_tokenizer.hpp"
#include "data/token_arrays.hpp"

namespace superoffload::data {

class Tokenizer;

struct PrepareStats {
  int64_t records = 0;
  int64_t tokens = 0;     // before padding
  int64_t truncated = 0;  // instruction samples cut to the row length
  int64_t dropped = 0;    // instruction samples left without any loss token by the cut
  int64_t skipped = 0;    // chat records the template refuses or whose assistant tokens cannot be told apart
  std::string first_skip; // why the first one was skipped
  int64_t rows = 0;
  int64_t local_records = 0, local_tokens = 0;  // this rank's share, before the gather
};

// Tokenized records of all ranks, concatenated in file order.
struct GatheredRecords {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> loss_mask;
  std::vector<int64_t> lengths;  // tokens per record
};

// Documents joined into one stream; doc_offsets marks where each starts.
TokenArrays assemble_stream(GatheredRecords records);
// Instruction samples in rows of `row_length` tokens: one per row (padded), or several per
// row (packed) when `packing`; padding has loss_mask 0.
TokenArrays assemble_rows(const GatheredRecords& records, int64_t row_length, bool packing, uint32_t pad,
                          PrepareStats& stats);

// The whole pipeline on every rank of `comm` (collective). Logs progress on rank 0.
// `template_dir`: where chat records find the model's chat template (the tokenizer's directory).
// `before_gather` (if set) runs on every rank once each has tokenized its share, with the
// records and tokens of this rank and of all (`stats`), before anything is gathered: where
// `prepare` plans and checks the memory the gathered arrays will take. `gather_to`: which ranks
// receive the assembled arrays (training samples from all of them on every rank; `prepare`
// writes them from rank 0, and the other ranks return empty arrays, holding only their share
// until it is sent). `stats` is the same on every rank either way.
enum class GatherTo { every_rank, first_rank };
TokenArrays prepare_records(const config::DataConfig& data, RecordFormat format, const Tokenizer& tokenizer,
                            MPI_Comm comm, PrepareStats& stats, const std::string& template_dir = {},
                            const std::function<void(const PrepareStats&)>& before_gather = nullptr,
                            GatherTo gather_to = GatherTo::every_rank);

}  // namespace superoffload::data
