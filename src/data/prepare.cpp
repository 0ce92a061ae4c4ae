// The prepare pipeline.
#include "data/prepare.hpp"

#include <climits>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "base/timer.hpp"
#include "cluster/check_mpi.hpp"
#include "data/jsonl_reader.hpp"
#include "data/tokenizer.hpp"
#include "io/checkpoint_files.hpp"

namespace superoffload::data {
namespace {

// Concatenates every rank's `local` in rank order, on every rank (`root` < 0) or on rank `root`
// alone (the others get an empty vector). `local` is consumed: freed once sent, or moved when
// it is all there is (one rank), so that a rank never holds its share twice.
template <class T>
std::vector<T> gather(std::vector<T>&& local, MPI_Datatype type, MPI_Comm comm, int root, const char* what) {
  int world = 1, rank = 0;
  SO_CHECK_MPI(MPI_Comm_size(comm, &world));
  SO_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  if (world == 1) return std::move(local);
  SO_CHECK(local.size() < static_cast<size_t>(INT_MAX),
           "this rank's share of " << what << " (" << local.size() << ") exceeds MPI's count limit"
                                   << hint("prepare the data with more ranks, or split the file"));
  const int count = static_cast<int>(local.size());
  std::vector<int> counts(static_cast<size_t>(world)), displacements(static_cast<size_t>(world));
  SO_CHECK_MPI(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm));
  int64_t total = 0;
  for (int r = 0; r < world; ++r) {
    SO_CHECK(total < INT_MAX, "the gathered " << what << " exceed MPI's count limit" << hint("split the file"));
    displacements[static_cast<size_t>(r)] = static_cast<int>(total);
    total += counts[static_cast<size_t>(r)];
  }
  std::vector<T> all(root < 0 || rank == root ? static_cast<size_t>(total) : 0);
  if (root >= 0) {
    SO_CHECK_MPI(MPI_Gatherv(local.data(), count, type, all.data(), counts.data(), displacements.data(), type, root, comm));
  } else {
    SO_CHECK_MPI(MPI_Allgatherv(local.data(), count, type, all.data(), counts.data(), displacements.data(), type, comm));
  }
  std::vector<T>().swap(local);
  return all;
}

}  // namespace

TokenArrays assemble_stream(GatheredRecords records) {
  TokenArrays arrays;
  arrays.tokens = std::move(records.tokens);
  int64_t offset = 0;
  for (const auto length : records.lengths) {
    arrays.doc_offsets.push_back(offset);
    offset += length;
  }
  return arrays;
}

TokenArrays assemble_rows(const GatheredRecords& records, int64_t row_length, bool packing, uint32_t pad,
                          PrepareStats& stats) {
  TokenArrays arrays;
  arrays.row_length = row_length;
  // Reserved for what the rows will hold (packed: the tokens and a few per cent of padding; else a
  // row per record) instead of growing two long arrays copy by copy.
  const size_t expected = packing ? records.tokens.size() + records.tokens.size() / 10 + static_cast<size_t>(row_length)
                                  : records.lengths.size() * static_cast<size_t>(row_length);
  arrays.tokens.reserve(expected);
  arrays.loss_mask.reserve(expected);
  arrays.doc_offsets.reserve(records.lengths.size());
  int64_t used = 0;  // tokens in the current row
  auto finish_row = [&] {
    arrays.tokens.insert(arrays.tokens.end(), static_cast<size_t>(row_length - used), pad);
    arrays.loss_mask.insert(arrays.loss_mask.end(), static_cast<size_t>(row_length - used), 0);
    used = 0;
  };
  int64_t begin = 0;
  for (const auto full_length : records.lengths) {
    const int64_t length = std::min(full_length, row_length);
    const auto first = static_cast<size_t>(begin);
    begin += full_length;
    if (length < full_length) ++stats.truncated;
    bool any_loss = false;
    for (int64_t i = 1; i < length; ++i) any_loss = any_loss || records.loss_mask[first + static_cast<size_t>(i)] != 0;
    if (!any_loss) {  // the response was cut off entirely: nothing to learn from
      ++stats.dropped;
      continue;
    }
    if (used > 0 && (!packing || used + length > row_length)) finish_row();
    arrays.doc_offsets.push_back(static_cast<int64_t>(arrays.tokens.size()));  // where the sample starts
    arrays.tokens.insert(arrays.tokens.end(), records.tokens.begin() + static_cast<std::ptrdiff_t>(first),
                         records.tokens.begin() + static_cast<std::ptrdiff_t>(first) + length);
    arrays.loss_mask.insert(arrays.loss_mask.end(), records.loss_mask.begin() + static_cast<std::ptrdiff_t>(first),
                            records.loss_mask.begin() + static_cast<std::ptrdiff_t>(first) + length);
    used += length;
  }
  if (used > 0) finish_row();
  stats.rows = arrays.rows();
  return arrays;
}

TokenArrays prepare_records(const config::DataConfig& data, RecordFormat format, const Tokenizer& tokenizer,
                            MPI_Comm comm, PrepareStats& stats, const std::string& template_dir,
                            const std::function<void(const PrepareStats&)>& before_gather, GatherTo gather_to) {
  int rank = 0, world = 1;
  SO_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  SO_CHECK_MPI(MPI_Comm_size(comm, &world));
  const RecordTokenizer record_tokenizer(tokenizer, data, format, template_dir);
  JsonlReader reader(data.path, rank, world);
  GatheredRecords local;
  nlohmann::ordered_json record;
  jinja::Value chat_record;  // chat records are read straight into the template's values
  const bool chat = format == RecordFormat::chat;
  int64_t skipped = 0;
  std::string first_skip;
  bool reserved = false;
  const double start_s = base::now_s();
  double last_report_s = start_s;
  const RecordTokenizer::Where where = [&reader] { return reader.where(); };
  while (chat ? reader.next(chat_record) : reader.next(record)) {
    const auto tokenized = chat ? record_tokenizer.tokenize_chat(chat_record, where) : record_tokenizer.tokenize(record, where);
    if (!tokenized.skipped.empty()) {
      if (skipped++ == 0) first_skip = reader.where() + ": " + tokenized.skipped;
      continue;
    }
    if (!reserved && reader.progress() >= 0.01) {
      // A vector that outgrows its capacity holds its old and new copy at once: up to twice the
      // share at the peak (a 60M-token share: 0.82 GiB where 0.67 GiB stay). Capacity for the
      // share projected from its first per cent instead, with a quarter to spare (pages never
      // written cost no memory; a node that does not overcommit must grant them): a file that
      // is denser later still grows as before.
      reserved = true;
      const double scale = 1.25 / reader.progress();
      local.tokens.reserve(static_cast<size_t>(scale * static_cast<double>(local.tokens.size())));
      local.loss_mask.reserve(static_cast<size_t>(scale * static_cast<double>(local.loss_mask.size())));
      local.lengths.reserve(static_cast<size_t>(scale * static_cast<double>(local.lengths.size())));
    }
    local.tokens.insert(local.tokens.end(), tokenized.tokens.begin(), tokenized.tokens.end());
    if (format != RecordFormat::text) {  // a document stream's every token is trained on: no mask is kept
      local.loss_mask.insert(local.loss_mask.end(), tokenized.loss_mask.begin(), tokenized.loss_mask.end());
    }
    local.lengths.push_back(static_cast<int64_t>(tokenized.tokens.size()));
    const double now = base::now_s();
    if (rank == 0 && now - last_report_s > 5) {
      SO_LOG(info) << "prepare: rank 0 at " << static_cast<int>(100 * reader.progress()) << "% of its share, "
                   << local.lengths.size() << " records, " << static_cast<int64_t>(local.tokens.size() / (now - start_s))
                   << " tokens/s";
      last_report_s = now;
    }
  }
  // Skipped chat records: counted over all ranks, the first (lowest rank's) reason said once.
  SO_CHECK_MPI(MPI_Allreduce(&skipped, &stats.skipped, 1, MPI_INT64_T, MPI_SUM, comm));
  stats.first_skip = io::lowest_rank_failure(first_skip, comm);
  if (rank == 0 && stats.skipped > 0) {
    SO_LOG(warning) << data.path << ": " << stats.skipped << " chat record(s) skipped, not trained on; the first: "
                    << stats.first_skip;
  }
  stats.local_records = static_cast<int64_t>(local.lengths.size());
  stats.local_tokens = static_cast<int64_t>(local.tokens.size());
  SO_CHECK_MPI(MPI_Allreduce(&stats.local_records, &stats.records, 1, MPI_INT64_T, MPI_SUM, comm));
  SO_CHECK_MPI(MPI_Allreduce(&stats.local_tokens, &stats.tokens, 1, MPI_INT64_T, MPI_SUM, comm));
  SO_CHECK(stats.records > 0, data.path << " holds no records"
                                       << (stats.skipped > 0 ? " that can be trained on (all " + std::to_string(stats.skipped) +
                                                                   " skipped; the first: " + stats.first_skip + ")"
                                                             : std::string()));
  if (before_gather) before_gather(stats);
  const int root = gather_to == GatherTo::first_rank ? 0 : -1;
  const bool assembles = root < 0 || rank == root;
  GatheredRecords all;
  all.lengths = gather(std::move(local.lengths), MPI_INT64_T, comm, root, "records");
  all.tokens = gather(std::move(local.tokens), MPI_UINT32_T, comm, root, "tokens");
  if (format != RecordFormat::text) all.loss_mask = gather(std::move(local.loss_mask), MPI_UINT8_T, comm, root, "loss masks");
  TokenArrays arrays;
  if (format == RecordFormat::text) {
    if (assembles) arrays = assemble_stream(std::move(all));
    return arrays;
  }
  if (assembles) arrays = assemble_rows(all, data.seq_len + 1, data.packing, static_cast<uint32_t>(tokenizer.pad_id()), stats);
  if (root >= 0) {  // the assembler's counts, so that every rank reports and refuses alike
    int64_t counts[3] = {stats.rows, stats.truncated, stats.dropped};
    SO_CHECK_MPI(MPI_Bcast(counts, 3, MPI_INT64_T, root, comm));
    stats.rows = counts[0];
    stats.truncated = counts[1];
    stats.dropped = counts[2];
  }
  SO_CHECK(stats.rows > 0, data.path << ": all " << stats.records << " instruction or chat samples lose their whole response when "
                                     << "cut to seq_len + 1 = " << data.seq_len + 1 << " tokens"
                                     << hint("raise [data] seq_len or shorten [data] prompt_template"));
  return arrays;
}

}  // namespace superoffload::data
