// Turns one JSONL record into training tokens: a `text` document (BOS as the tokenizer adds
// it, then EOS), or an Alpaca-style instruction record (`instruction`, optional `input`,
// `output`) rendered with the prompt templates of [data], where the prompt carries no loss.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace superoffload::data {

class Tokenizer;

enum class RecordFormat { text, alpaca };

// The format of [data] path: hdf5 for .h5/.hdf5 files, else jsonl or alpaca (for "auto",
// from the first record's fields); never automatic. Throws naming the file and what was found.
config::DataFormat resolve_data_format(const config::DataConfig& data);
// How records of a JSON Lines format are tokenized.
inline RecordFormat record_format(config::DataFormat format) {
  return format == config::DataFormat::alpaca ? RecordFormat::alpaca : RecordFormat::text;
}

struct TokenizedRecord {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> loss_mask;  // 1 where the token is a target that counts; same length
};

class RecordTokenizer {
 public:
  // Checks the templates ({instruction} and {input} placeholders) once, up front.
  RecordTokenizer(const Tokenizer& tokenizer, const config::DataConfig& data, RecordFormat format);
  // `where` gives "file:line" for errors; it is called only when there is one (finding the
  // line number means reading the file up to it).
  using Where = std::function<std::string()>;
  TokenizedRecord tokenize(const nlohmann::json& record, const Where& where) const;

 private:
  std::string field(const nlohmann::json& record, const char* name, bool required, const Where& where) const;
  const Tokenizer& tokenizer_;
  const config::DataConfig& data_;
  RecordFormat format_;
};

}  // namespace superoffload::data
