// Tokenizer base and load_tokenizer(): which implementation a HuggingFace directory needs,
// and its special tokens from tokenizer_config.json and config.json.
#include "data/tokenizer.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "data/json_tokenizer.hpp"
#include "data/sentencepiece_tokenizer.hpp"

namespace superoffload::data {

namespace fs = std::filesystem;

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids = special_.prefix;
  const auto body = encode_text(text);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), special_.suffix.begin(), special_.suffix.end());
  return ids;
}

int32_t Tokenizer::eos_id() const {
  SO_CHECK(special_.eos.has_value(),
           "the tokenizer (" << kind() << ") has no end-of-sequence token"
                             << hint("set eos_token in tokenizer_config.json or eos_token_id in config.json"));
  return *special_.eos;
}

int32_t Tokenizer::pad_id() const { return special_.pad ? *special_.pad : eos_id(); }

namespace {

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  SO_CHECK(in, "cannot open " << path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    SO_FAIL(path.string() << " is not valid JSON: " << e.what());
  }
}

// tokenizer_config.json writes a token as a string or as {"content": ...}.
std::optional<std::string> token_text(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const auto& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content")) return value["content"].get<std::string>();
  return std::nullopt;
}

// config.json's ids may be a number or a list (Llama 3.1: several end-of-turn ids).
std::optional<int32_t> config_id(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const auto& value = config[key];
  const auto& first = value.is_array() && !value.empty() ? value[0] : value;
  if (!first.is_number_integer()) return std::nullopt;
  const auto id = first.get<int64_t>();
  SO_CHECK(id >= 0 && id <= INT32_MAX, "config.json: " << key << " = " << id << " is not a token id"
                                                        << hint("token ids are non-negative integers"));
  return static_cast<int32_t>(id);
}

bool is_byte_level(const nlohmann::json& tokenizer) {
  return tokenizer.value("pre_tokenizer", nlohmann::json()).dump().find("\"ByteLevel\"") != std::string::npos;
}

// What a tokenizer file holds, by its content: tokenizer.json is a JSON object; a SentencePiece
// model is a protobuf, whose first byte is the tag of field 1 (pieces, length-delimited: 0x0A).
enum class TokenizerFile { json, sentencepiece, other };

TokenizerFile sniff(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  SO_CHECK(in, "cannot open the tokenizer file " << path.string());
  char first = 0, c = 0;
  if (!in.get(first)) return TokenizerFile::other;
  c = first;
  while ((c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\xEF' || c == '\xBB' || c == '\xBF') && in.get(c)) {
  }
  if (c == '{') return TokenizerFile::json;  // after white space or a byte-order mark
  if (first == '\x0A') return TokenizerFile::sentencepiece;
  return TokenizerFile::other;
}

// A directory's SentencePiece model: tokenizer.model, else a tokenizer.model.* (Mistral's
// tokenizer.model.v3), else none.
fs::path sentencepiece_in(const fs::path& dir) {
  if (fs::exists(dir / "tokenizer.model")) return dir / "tokenizer.model";
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (entry.is_regular_file() && name.rfind("tokenizer.model.", 0) == 0) found.push_back(entry.path());
  }
  std::sort(found.begin(), found.end());
  for (const auto& path : found) {
    if (sniff(path) == TokenizerFile::sentencepiece) return path;
  }
  return {};
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  const fs::path given(path);
  SO_CHECK(fs::exists(given), "tokenizer path " << path << " does not exist"
                                                << hint("set [data] tokenizer, or put the tokenizer files in the model "
                                                        "directory ([model] path)"));
  const fs::path dir = fs::is_directory(given) ? given : given.parent_path();
  fs::path json_file, model_file;
  if (fs::is_directory(given)) {
    if (fs::exists(dir / "tokenizer.json")) json_file = dir / "tokenizer.json";
    model_file = sentencepiece_in(dir);
  } else {
    // A file is taken by what it holds, whatever its name.
    switch (sniff(given)) {
      case TokenizerFile::json: json_file = given; break;
      case TokenizerFile::sentencepiece: model_file = given; break;
      case TokenizerFile::other:
        SO_FAIL(path << " is neither a HF tokenizer.json (a JSON object) nor a SentencePiece model (a protobuf)"
                     << hint("point [data] tokenizer at the base model's tokenizer.json or tokenizer.model, or at "
                             "its directory"));
    }
  }

  std::unique_ptr<Tokenizer> tokenizer;
  SentencePieceTokenizer* sentencepiece = nullptr;
  std::optional<nlohmann::json> json;
  if (!json_file.empty()) json = read_json(json_file);
  // A Llama 2 / Mistral directory holds both; its tokenizer.json is a SentencePiece-style BPE
  // converted from tokenizer.model, which is the original and is kept (trainer and prepare log
  // which file is used). Without tokenizer.model the tokenizer.json is read on its own.
  if (json && (is_byte_level(*json) || model_file.empty())) {
    try {
      tokenizer = std::make_unique<JsonTokenizer>(*json, json_file.string());
    } catch (const nlohmann::json::exception& e) {
      SO_FAIL(json_file.string() << " is not a valid HF tokenizer file: " << e.what());
    }
  } else if (!model_file.empty()) {
    auto sp = std::make_unique<SentencePieceTokenizer>(model_file.string());
    sentencepiece = sp.get();
    tokenizer = std::move(sp);
  } else {
    SO_FAIL("no tokenizer in " << dir.string() << ": neither tokenizer.json nor tokenizer.model"
                               << hint("copy the tokenizer files of the base model into the directory, or set "
                                       "[data] tokenizer"));
  }

  nlohmann::json tokenizer_config = nlohmann::json::object(), model_config = nlohmann::json::object();
  if (fs::exists(dir / "tokenizer_config.json")) tokenizer_config = read_json(dir / "tokenizer_config.json");
  if (fs::exists(dir / "config.json")) model_config = read_json(dir / "config.json");
  auto special = tokenizer->special();
  auto resolve = [&](const char* token_key, const char* id_key, int32_t model_id) -> std::optional<int32_t> {
    if (const auto text = token_text(tokenizer_config, token_key)) {
      const auto id = tokenizer->token_id(*text);
      SO_CHECK(id.has_value(), (dir / "tokenizer_config.json").string() << ": " << token_key << " \"" << *text
                                                                        << "\" is not in the vocabulary");
      return id;
    }
    if (const auto id = config_id(model_config, id_key)) return id;
    if (model_id >= 0) return model_id;
    return std::nullopt;
  };
  special.bos = resolve("bos_token", "bos_token_id", sentencepiece ? sentencepiece->model_bos() : -1);
  special.eos = resolve("eos_token", "eos_token_id", sentencepiece ? sentencepiece->model_eos() : -1);
  special.pad = resolve("pad_token", "pad_token_id", sentencepiece ? sentencepiece->model_pad() : -1);
  if (sentencepiece) {
    // HF's LlamaTokenizer: add_bos_token defaults to true, add_eos_token to false.
    special.prefix.clear();
    special.suffix.clear();
    if (tokenizer_config.value("add_bos_token", true) && special.bos) special.prefix.push_back(*special.bos);
    if (tokenizer_config.value("add_eos_token", false) && special.eos) special.suffix.push_back(*special.eos);
  }
  for (const auto& [name, id] :
       {std::pair{"bos", special.bos}, std::pair{"eos", special.eos}, std::pair{"pad", special.pad}}) {
    SO_CHECK(!id || (*id >= 0 && *id < tokenizer->vocab_size()),
             dir.string() << ": the " << name << " token id " << *id << " is outside the tokenizer's vocabulary of "
                          << tokenizer->vocab_size()
                          << hint(std::string("check ") + name + "_token in tokenizer_config.json and " + name +
                                  "_token_id in config.json"));
  }
  for (const auto& ids : {special.prefix, special.suffix}) {
    for (const auto id : ids) {
      SO_CHECK(id >= 0 && id < tokenizer->vocab_size(),
               dir.string() << ": the post-processor adds token id " << id << ", outside the tokenizer's vocabulary of "
                            << tokenizer->vocab_size());
    }
  }
  tokenizer->set_special(std::move(special));
  return tokenizer;
}

std::string tokenizer_directory(const std::string& path) {
  const std::filesystem::path p(path);
  return std::filesystem::is_directory(p) ? path : p.parent_path().string();
}

}  // namespace superoffload::data
