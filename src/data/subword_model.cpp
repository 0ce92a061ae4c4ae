// SubwordModel's vocabulary bookkeeping and the choice of model from tokenizer.json.
#include "data/subword_model.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "data/bpe_model.hpp"
#include "data/unigram_model.hpp"

namespace superoffload::data {

namespace {
constexpr int64_t kMaxTokenId = int64_t{1} << 24;
}  // namespace

int32_t token_id_value(const nlohmann::json& value, const std::string& source, const std::string& what) {
  SO_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < kMaxTokenId,
           source << ": " << what << " has id " << value.dump() << "; token ids are integers in [0, " << kMaxTokenId
                  << ")" << hint("the tokenizer file is corrupt or was edited by hand; take it from the base model"));
  return static_cast<int32_t>(value.get<int64_t>());
}

void SubwordModel::add_token(const std::string& token, const nlohmann::json& id_value, const std::string& source) {
  const int32_t id = token_id_value(id_value, source, "vocabulary token \"" + token + "\"");
  if (static_cast<size_t>(id) >= id_to_token_.size()) id_to_token_.resize(static_cast<size_t>(id) + 1);
  auto& slot = id_to_token_[static_cast<size_t>(id)];
  SO_CHECK(slot.empty(), source << ": vocabulary tokens \"" << slot << "\" and \"" << token << "\" share id " << id
                                << hint("each id names one token; the file is corrupt"));
  const auto [existing, fresh] = vocab_.emplace(token, id);
  SO_CHECK(fresh, source << ": the vocabulary lists \"" << token << "\" twice (ids " << existing->second << " and " << id
                         << ")" << hint("each token has one id; the file is corrupt"));
  slot = token;
}

void SubwordModel::find_byte_tokens() {
  byte_tokens_.assign(256, -1);
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const auto found = vocab_.find(name);
    if (found != vocab_.end()) byte_tokens_[static_cast<size_t>(b)] = found->second;
  }
}

bool SubwordModel::append_bytes(std::string_view text, std::vector<int32_t>& out) const {
  if (byte_tokens_.empty()) return false;
  for (const char c : text) {
    if (byte_tokens_[static_cast<unsigned char>(c)] < 0) return false;
  }
  for (const char c : text) out.push_back(byte_tokens_[static_cast<unsigned char>(c)]);
  return true;
}

std::unique_ptr<SubwordModel> make_subword_model(const nlohmann::json& model, const std::string& source) {
  const auto type = model.value("type", std::string(model.contains("merges") ? "BPE" : ""));
  if (type == "BPE") return std::make_unique<BpeModel>(model, source);
  if (type == "Unigram") return std::make_unique<UnigramModel>(model, source);
  SO_FAIL(source << ": model type \"" << type << "\" is not supported (supported: BPE, Unigram)"
                 << hint("decoder language models ship BPE or Unigram; WordPiece and WordLevel are encoder vocabularies"));
}

}  // namespace superoffload::data
