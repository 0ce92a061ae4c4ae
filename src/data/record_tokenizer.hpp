// Turns one JSONL record into training tokens: a `text` document (BOS as the tokenizer adds
// it, then EOS), an Alpaca-style instruction record (`instruction`, optional `input`,
// `output`) rendered with the prompt templates of [data], where the prompt carries no loss, or
// a chat record rendered with the model's chat template, where only the assistant's turns
// carry loss ([data] train_on = "assistant", data/chat_template.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "jinja/value.hpp"

namespace superoffload::data {

class Tokenizer;
class ChatRenderer;

enum class RecordFormat { text, alpaca, chat };

// The format of [data] path: hdf5 for .h5/.hdf5 files, else jsonl or alpaca (for "auto",
// from the first record's fields); never automatic. Throws naming the file and what was found.
config::DataFormat resolve_data_format(const config::DataConfig& data);
// How records of a JSON Lines format are tokenized.
inline RecordFormat record_format(config::DataFormat format) {
  return format == config::DataFormat::alpaca ? RecordFormat::alpaca
         : format == config::DataFormat::chat ? RecordFormat::chat
                                              : RecordFormat::text;
}

struct TokenizedRecord {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> loss_mask;  // 1 where the token is a target that counts; same length
  // A chat record the template refuses (raise_exception), or whose assistant turns cannot be
  // told apart: skipped and counted, not trained on; why (without the record's line, which
  // costs a read of the file to find). Empty when tokenized.
  std::string skipped;
};

class RecordTokenizer {
 public:
  // Checks the templates ({instruction} and {input} placeholders) once, up front; chat records
  // load the chat template of `template_dir` (the tokenizer's directory) or [data] chat_template.
  RecordTokenizer(const Tokenizer& tokenizer, const config::DataConfig& data, RecordFormat format,
                  const std::string& template_dir = {});
  ~RecordTokenizer();
  const ChatRenderer* chat() const { return chat_.get(); }
  // `where` gives "file:line" for errors; it is called only when there is one (finding the
  // line number means reading the file up to it).
  using Where = std::function<std::string()>;
  TokenizedRecord tokenize(const nlohmann::ordered_json& record, const Where& where) const;
  // A chat record read as values (JsonlReader::next into a jinja::Value): what `prepare` reads,
  // without a JSON document on the way. Only for RecordFormat::chat.
  TokenizedRecord tokenize_chat(const jinja::Value& record, const Where& where) const;

 private:
  std::string field(const nlohmann::ordered_json& record, const char* name, bool required, const Where& where) const;
  const Tokenizer& tokenizer_;
  const config::DataConfig& data_;
  RecordFormat format_;
  std::unique_ptr<ChatRenderer> chat_;
};

}  // namespace superoffload::data
