// RecordTokenizer.
#include "data/record_tokenizer.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "data/chat_conversation.hpp"
#include "data/chat_template.hpp"
#include "data/tokenizer.hpp"

namespace superoffload::data {
namespace {

// Fills {instruction} and {input} in one pass, so braces inside the values stay as they are.
std::string render(const std::string& prompt_template, const std::string& instruction, const std::string& input) {
  std::string out;
  for (size_t i = 0; i < prompt_template.size();) {
    if (prompt_template.compare(i, 13, "{instruction}") == 0) {
      out += instruction;
      i += 13;
    } else if (prompt_template.compare(i, 7, "{input}") == 0) {
      out += input;
      i += 7;
    } else {
      out += prompt_template[i++];
    }
  }
  return out;
}

void append(std::vector<uint32_t>& tokens, std::vector<uint8_t>& mask, const std::vector<int32_t>& ids, uint8_t loss) {
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  mask.insert(mask.end(), ids.size(), loss);
}

}  // namespace

config::DataFormat resolve_data_format(const config::DataConfig& data) {
  using config::DataFormat;
  const std::filesystem::path path(data.path);
  const auto extension = path.extension().string();
  if (data.format == DataFormat::hdf5 ||
      (data.format == DataFormat::automatic && (extension == ".h5" || extension == ".hdf5"))) {
    return DataFormat::hdf5;
  }
  if (data.format != DataFormat::automatic) return data.format;
  std::ifstream in(path);
  SO_CHECK(in, "cannot open the dataset " << data.path << hint("check [data] path"));
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      SO_FAIL(data.path << ":" << number << ": not valid JSON (" << e.what() << ")"
                        << hint("[data] path must be an HDF5 file (.h5) or JSON Lines, one object per line"));
    }
    if (record.is_object() && record.contains("instruction")) return DataFormat::alpaca;
    if (record.is_object() && (record.contains("messages") || record.contains("conversations"))) return DataFormat::chat;
    if (record.is_object() && record.contains("text")) return DataFormat::jsonl;
    SO_FAIL(data.path << ":" << number << ": the first record has none of \"text\", \"instruction\", \"messages\" or "
                      << "\"conversations\""
                      << hint("use {\"text\": ...} documents, {\"instruction\", \"input\", \"output\"} records or "
                              "{\"messages\": [...]} chat records, or set [data] format"));
  }
  SO_FAIL(data.path << " holds no records");
}

RecordTokenizer::RecordTokenizer(const Tokenizer& tokenizer, const config::DataConfig& data, RecordFormat format,
                                 const std::string& template_dir)
    : tokenizer_(tokenizer), data_(data), format_(format) {
  if (format_ == RecordFormat::chat) {
    // The template's special-token variables, as HF passes them: the tokens' text.
    nlohmann::ordered_json variables = nlohmann::ordered_json::object();
    const auto& special = tokenizer_.special();
    if (special.bos) variables["bos_token"] = tokenizer_.decode({*special.bos});
    if (special.eos) variables["eos_token"] = tokenizer_.decode({*special.eos});
    if (special.pad) variables["pad_token"] = tokenizer_.decode({*special.pad});
    chat_ = std::make_unique<ChatRenderer>(find_chat_template(template_dir, data.chat_template), std::move(variables));
    return;
  }
  if (format_ == RecordFormat::alpaca) {
    SO_CHECK(data.prompt_template.find("{instruction}") != std::string::npos &&
                 data.prompt_template.find("{input}") != std::string::npos,
             "[data] prompt_template must contain {instruction} and {input}");
    SO_CHECK(data.prompt_template_no_input.find("{instruction}") != std::string::npos,
             "[data] prompt_template_no_input must contain {instruction}");
  }
  tokenizer_.eos_id();  // both formats end with EOS; fail now, not at the first record
}

RecordTokenizer::~RecordTokenizer() = default;

std::string RecordTokenizer::field(const nlohmann::ordered_json& record, const char* name, bool required,
                                   const Where& where) const {
  if (!record.contains(name) || record[name].is_null()) {
    SO_CHECK(!required, where() << ": the record has no \"" << name << "\" field");
    return {};
  }
  SO_CHECK(record[name].is_string(), where() << ": \"" << name << "\" must be a string, not a " << record[name].type_name());
  return record[name].get<std::string>();
}

TokenizedRecord RecordTokenizer::tokenize(const nlohmann::ordered_json& record, const Where& where) const {
  if (format_ == RecordFormat::chat) return tokenize_chat(jinja::Value::from_json(record), where);
  TokenizedRecord out;
  const auto& special = tokenizer_.special();
  const auto eos = static_cast<uint32_t>(tokenizer_.eos_id());
  if (format_ == RecordFormat::text) {
    append(out.tokens, out.loss_mask, tokenizer_.encode(field(record, "text", true, where)), 1);
    if (out.tokens.empty() || out.tokens.back() != eos) append(out.tokens, out.loss_mask, {static_cast<int32_t>(eos)}, 1);
    return out;
  }
  const auto instruction = field(record, "instruction", true, where);
  const auto input = field(record, "input", false, where);
  const auto output = field(record, "output", true, where);
  const auto prompt = render(input.empty() ? data_.prompt_template_no_input : data_.prompt_template, instruction, input);
  // Prompt and response are tokenized apart so that the boundary of the loss is exact.
  append(out.tokens, out.loss_mask, special.prefix, 0);
  append(out.tokens, out.loss_mask, tokenizer_.encode_text(prompt), 0);
  append(out.tokens, out.loss_mask, tokenizer_.encode_text(output), 1);
  append(out.tokens, out.loss_mask, {static_cast<int32_t>(eos)}, 1);
  return out;
}

// The rendered conversation, tokenized as HF tokenizes it (the whole text, special tokens
// written in it recognised, none added), with the assistant's bytes mapped to tokens. Where
// the tokenizer gives offsets, a token carries loss when any of its bytes is the assistant's
// (HF's return_assistant_tokens_mask marks char_to_token of a span's first and last character
// and all between: the same tokens). Otherwise the text is tokenized in pieces cut at the
// spans' edges, which must give exactly the whole text's tokens: an edge inside a token has no
// exact mask then, and the record is skipped.
TokenizedRecord RecordTokenizer::tokenize_chat(const jinja::Value& record, const Where& where) const {
  SO_CHECK(chat_, "internal: tokenize_chat on a reader of another format");
  TokenizedRecord out;
  RenderedConversation rendered;
  try {
    rendered = chat_->render(parse_conversation(record, where));
  } catch (const jinja::RaisedException& e) {
    out.skipped = std::string("the chat template refuses it: ") + e.what();
    return out;
  } catch (const NotAPrefix& e) {
    out.skipped = e.what();
    return out;
  }
  if (data_.train_on == config::TrainOn::all) {
    append(out.tokens, out.loss_mask, tokenizer_.encode_text(rendered.text), 1);
    return out;
  }
  if (auto encoded = tokenizer_.encode_text_with_offsets(rendered.text)) {
    size_t span = 0;  // spans and tokens both in text order
    out.tokens.reserve(encoded->ids.size());
    out.loss_mask.reserve(encoded->ids.size());
    for (size_t i = 0; i < encoded->ids.size(); ++i) {
      const auto [begin, end] = encoded->offsets[i];
      while (span < rendered.assistant.size() && rendered.assistant[span].second <= begin) ++span;
      const bool assistant = span < rendered.assistant.size() && rendered.assistant[span].first < end;
      out.tokens.push_back(static_cast<uint32_t>(encoded->ids[i]));
      out.loss_mask.push_back(assistant ? 1 : 0);
    }
    return out;
  }
  size_t at = 0;
  auto piece = [&](size_t end, uint8_t loss) {
    if (end > at) append(out.tokens, out.loss_mask, tokenizer_.encode_text(std::string_view(rendered.text).substr(at, end - at)), loss);
    at = end;
  };
  for (const auto& [begin, end] : rendered.assistant) {
    piece(begin, 0);
    piece(end, 1);
  }
  piece(rendered.text.size(), 0);
  const auto whole = tokenizer_.encode_text(rendered.text);
  if (!std::equal(whole.begin(), whole.end(), out.tokens.begin(), out.tokens.end(),
                  [](int32_t a, uint32_t b) { return static_cast<uint32_t>(a) == b; })) {
    return {.skipped = "an assistant turn begins or ends inside a token of the rendered text, so its tokens "
                                 "cannot be told apart exactly"};
  }
  return out;
}

}  // namespace superoffload::data
