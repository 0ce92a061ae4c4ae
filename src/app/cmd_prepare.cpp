// `superoffload prepare CONFIG --output data.h5`: tokenizes the JSONL of [data] path with the
// model's tokenizer, split over the MPI ranks, and writes the pre-tokenized HDF5 that
// `train` reads (a document stream for text, padded or packed rows with a loss mask for
// instruction and chat records). `--show N` prints the first N samples as text with the
// tokens that carry loss between [[ and ]], so a user sees what is trained on.
#include <cstdio>
#include <filesystem>

#include "app/commands.hpp"
#include "base/error.hpp"
#include "base/timer.hpp"
#include "cluster/mpi_world.hpp"
#include "data/prepare.hpp"
#include "data/tokenizer.hpp"
#include "train/command_memory.hpp"

namespace superoffload::app {

namespace {

// Each sample (a document of a stream, or a row up to its padding) as text, loss runs marked.
void show_samples(const data::TokenArrays& arrays, const data::Tokenizer& tokenizer, int64_t count) {
  const auto samples = static_cast<int64_t>(arrays.doc_offsets.size());
  for (int64_t s = 0; s < std::min(count, samples); ++s) {
    const auto begin = static_cast<size_t>(arrays.doc_offsets[static_cast<size_t>(s)]);
    size_t end = s + 1 < samples ? static_cast<size_t>(arrays.doc_offsets[static_cast<size_t>(s + 1)]) : arrays.tokens.size();
    if (arrays.row_length > 0) {  // not past the row, and not its padding (pad tokens without loss)
      end = std::min(end, (begin / static_cast<size_t>(arrays.row_length) + 1) * static_cast<size_t>(arrays.row_length));
      const auto pad = static_cast<uint32_t>(tokenizer.pad_id());
      while (end > begin && arrays.tokens[end - 1] == pad && arrays.loss_mask[end - 1] == 0) --end;
    }
    std::string text;
    for (size_t i = begin; i < end;) {
      const bool loss = arrays.loss_mask.empty() || arrays.loss_mask[i] != 0;
      size_t j = i;
      std::vector<int32_t> run;
      while (j < end && (arrays.loss_mask.empty() || (arrays.loss_mask[j] != 0) == loss)) run.push_back(static_cast<int32_t>(arrays.tokens[j++]));
      text += loss ? "[[" + tokenizer.decode(run) + "]]" : tokenizer.decode(run);
      i = j;
    }
    std::printf("---- sample %lld (%zu tokens)\n%s\n", static_cast<long long>(s), end - begin, text.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

void add_prepare_command(CLI::App& app, const GlobalOptions& globals, Run& run) {
  auto* command = app.add_subcommand("prepare", "Tokenize a JSONL dataset into the HDF5 format train reads");
  struct Options {
    ConfigOptions config;
    std::string output;
    int64_t show = 0;
  };
  auto options = std::make_shared<Options>();
  add_config_options(*command, options->config, false);
  command->add_option("--output,-o", options->output, "HDF5 file to write (e.g. data/train.h5)")->required();
  command->add_option("--show", options->show,
                      "Print the first N samples as text, the tokens that carry loss between [[ and ]]")
      ->check(CLI::NonNegativeNumber);
  command->callback([&run, &globals, options] {
    run = [&globals, options](const cluster::MpiWorld& world) {
      const auto loaded = load_config_or_exit(world, options->config, globals, world.size());
      const auto& data = loaded.config.data;
      const auto format = data::resolve_data_format(data);
      SO_CHECK(format != config::DataFormat::hdf5, "[data] path " << data.path << " is already pre-tokenized HDF5"
                                                << hint("point [data] path at a JSONL file"));
      const auto tokenizer_path = data.tokenizer.empty() ? loaded.config.model.path : data.tokenizer;
      const auto tokenizer = data::load_tokenizer(tokenizer_path);
      const double start_s = base::now_s();
      if (world.rank() == 0) {
        SO_LOG(info) << "prepare: " << data.path << " (" << config::to_text(format) << ") with the " << tokenizer->kind() << " of "
                     << tokenizer_path << " on " << world.size() << " rank(s)";
      }
      data::PrepareStats stats;
      const bool rows = format == config::DataFormat::alpaca || format == config::DataFormat::chat;
      // Rank 0 gathers every rank's tokens, assembles and writes them; the others hold their
      // share until it is sent. Planned and checked once the counts are known, before those
      // arrays are allocated (rank 0's node: its plan beside the others'; every rank of a node
      // reaches the same verdict); set beside the peak at the end.
      train::CommandMemory plan;
      const auto check_plan = [&](const data::PrepareStats& counts) {
        train::PrepareCounts shape{.local_tokens = counts.local_tokens,
                                   .local_records = counts.local_records,
                                   .tokens = counts.tokens,
                                   .records = counts.records,
                                   .with_mask = format != config::DataFormat::jsonl,
                                   .row_length = rows ? data.seq_len + 1 : 0,
                                   .packing = data.packing,
                                   .assembles = false,
                                   .ranks = world.size()};
        const auto sender = train::plan_prepare_memory(shape);
        shape.assembles = true;
        const auto writer = train::plan_prepare_memory(shape);
        plan = world.rank() == 0 ? writer : sender;
        train::check_command_memory(sender, world.local_size(), world.node_index() == 0 ? &writer : nullptr);
      };
      const auto arrays = data::prepare_records(data, data::record_format(format), *tokenizer, world.world(), stats,
                                                data::tokenizer_directory(tokenizer_path), check_plan,
                                                data::GatherTo::first_rank);
      if (world.rank() == 0) {
        data::write_token_file(options->output, arrays,
                               {{"source", data.path},
                                {"format", std::string(config::to_text(format))},
                                {"tokenizer", tokenizer_path},
                                {"seq_len", rows ? std::to_string(data.seq_len) : std::string("any")},
                                {"packing", data.packing ? "true" : "false"}});
        SO_LOG(info) << "prepare: wrote " << options->output << ": " << stats.records << " records, " << stats.tokens
                     << " tokens"
                     << (rows ? " in " + std::to_string(stats.rows) + " rows of " + std::to_string(data.seq_len + 1) +
                                    " (" + std::to_string(stats.truncated) + " truncated, " + std::to_string(stats.dropped) +
                                    " dropped, " + std::to_string(stats.skipped) + " skipped)"
                              : std::string())
                     << " in " << base::now_s() - start_s << " s";
        train::log_command_memory(plan);
        show_samples(arrays, *tokenizer, options->show);
      }
      return 0;
    };
  });
}

}  // namespace superoffload::app
