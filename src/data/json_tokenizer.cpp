// JsonTokenizer: tokenizer.json's pipeline around its model.
#include "data/json_tokenizer.hpp"

#include <algorithm>
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace superoffload::data {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// HF's word character for single_word: Rust's char::is_alphanumeric (Alphabetic or a number) or '_'.
bool is_word_code_point(UChar32 c) {
  if (c == '_' || u_hasBinaryProperty(c, UCHAR_ALPHABETIC)) return true;
  const auto type = u_charType(c);
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

// Whether the character that ends text[0, end) / starts text[begin, ...) is a word character.
bool word_before(std::string_view text, size_t end) {
  if (end == 0) return false;
  size_t begin = end - 1;
  while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  int32_t at = static_cast<int32_t>(begin);
  UChar32 c = 0;
  U8_NEXT(reinterpret_cast<const uint8_t*>(text.data()), at, static_cast<int32_t>(text.size()), c);
  return c >= 0 && is_word_code_point(c);
}

bool word_after(std::string_view text, size_t begin) {
  if (begin >= text.size()) return false;
  int32_t at = static_cast<int32_t>(begin);
  UChar32 c = 0;
  U8_NEXT(reinterpret_cast<const uint8_t*>(text.data()), at, static_cast<int32_t>(text.size()), c);
  return c >= 0 && is_word_code_point(c);
}

// The special-token ids a post-processor puts before and after a single sequence.
void parse_post_processor(const nlohmann::json& spec, const std::string& source, SpecialTokens& special) {
  if (spec.is_null()) return;
  const auto type = spec.value("type", std::string());
  if (type == "ByteLevel") return;  // offsets only; ids unchanged
  if (type == "Sequence") {
    for (const auto& part : spec.at("processors")) parse_post_processor(part, source, special);
    return;
  }
  if (type == "TemplateProcessing") {
    bool after = false;
    for (const auto& item : spec.at("single")) {
      if (item.contains("Sequence")) {
        after = true;
        continue;
      }
      const auto name = item.at("SpecialToken").at("id").get<std::string>();
      SO_CHECK(spec.at("special_tokens").contains(name),
               source << ": the post-processor template names \"" << name << "\", which it does not define");
      for (const auto& id : spec.at("special_tokens").at(name).at("ids")) {
        (after ? special.suffix : special.prefix)
            .push_back(token_id_value(id, source, "post-processor special token \"" + name + "\""));
      }
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    special.prefix.push_back(token_id_value(spec.at("cls").at(1), source, "post-processor cls token"));
    special.suffix.push_back(token_id_value(spec.at("sep").at(1), source, "post-processor sep token"));
    return;
  }
  SO_FAIL(source << ": post-processor \"" << type
                 << "\" is not supported (supported: TemplateProcessing, ByteLevel, RobertaProcessing, "
                    "BertProcessing, Sequence)");
}

}  // namespace

const JsonTokenizer::AddedToken* JsonTokenizer::AddedTokens::at(std::string_view text, size_t position) const {
  if (!first_byte[static_cast<unsigned char>(text[position])]) return nullptr;
  for (const auto& added : tokens) {  // longest first
    if (text.compare(position, added.content.size(), added.content) != 0) continue;
    if (added.single_word) {
      const size_t end = position + added.content.size();
      if (word_before(text, position) || word_after(text, end)) continue;
    }
    return &added;
  }
  return nullptr;
}

bool JsonTokenizer::AddedTokens::split(std::string_view text, const std::function<bool(size_t, size_t)>& plain,
                                       const std::function<void(const AddedToken&, size_t)>& added_token) const {
  if (tokens.empty()) return plain(0, text.size());
  size_t plain_begin = 0, position = 0;
  while (position < text.size()) {
    const AddedToken* added = at(text, position);
    if (added == nullptr) {
      ++position;
      continue;
    }
    size_t plain_end = position;
    if (added->lstrip) {
      while (plain_end > plain_begin && is_space(text[plain_end - 1])) --plain_end;
    }
    if (!plain(plain_begin, plain_end)) return false;
    added_token(*added, position);
    position += added->content.size();
    if (added->rstrip) {
      while (position < text.size() && is_space(text[position])) ++position;
    }
    plain_begin = position;
  }
  return plain(plain_begin, text.size());
}

JsonTokenizer::JsonTokenizer(const nlohmann::json& tokenizer, const std::string& source)
    : source_(source),
      normalizer_(tokenizer.value("normalizer", nlohmann::json()), source),
      pre_tokenizer_(tokenizer.value("pre_tokenizer", nlohmann::json()), source),
      model_(make_subword_model(tokenizer.at("model"), source)),
      decoder_(tokenizer.value("decoder", nlohmann::json()), pre_tokenizer_.byte_level(), source) {
  const auto& by_id = model_->id_to_token();
  vocab_size_ = static_cast<int64_t>(by_id.size());
  for (const auto& added : tokenizer.value("added_tokens", nlohmann::json::array())) {
    const auto content = added.at("content").get<std::string>();
    const bool special = added.value("special", false);
    AddedToken t{content, token_id_value(added.at("id"), source, "added token \"" + content + "\""),
                 added.value("lstrip", false), added.value("rstrip", false), added.value("single_word", false)};
    SO_CHECK(!t.content.empty(), source << ": added token " << t.id << " is empty");
    // GPT-2 style files list "<|endoftext|>" in the vocabulary and as an added token with the
    // same id; an added token taking another token's id would make decoding ambiguous.
    const bool in_model = static_cast<size_t>(t.id) < by_id.size() && !by_id[static_cast<size_t>(t.id)].empty();
    SO_CHECK(!in_model || by_id[static_cast<size_t>(t.id)] == t.content,
             source << ": added token \"" << t.content << "\" has id " << t.id << ", which the vocabulary gives to \""
                    << by_id[static_cast<size_t>(t.id)] << "\"" << hint("each id names one token; the file is corrupt"));
    const auto [other, fresh] = added_by_id_.emplace(t.id, t.content);
    SO_CHECK(fresh, source << ": added tokens \"" << other->second << "\" and \"" << t.content << "\" share id " << t.id
                           << hint("each id names one token; the file is corrupt"));
    vocab_size_ = std::max<int64_t>(vocab_size_, t.id + 1);
    added_by_name_.emplace(t.content, t.id);
    // HF: special tokens default to normalized = false, the others to true; a normalized token
    // is matched in the normalized text, as its content normalizes, and decodes as that.
    auto& stage = added.value("normalized", !special) && !normalizer_.empty() ? normalized_added_ : raw_added_;
    if (&stage == &normalized_added_) t.content = other->second = normalizer_.apply(t.content);
    if (t.content.empty()) continue;
    stage.first_byte[static_cast<unsigned char>(t.content[0])] = true;
    stage.tokens.push_back(std::move(t));
  }
  for (auto* stage : {&raw_added_, &normalized_added_}) {
    std::stable_sort(stage->tokens.begin(), stage->tokens.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  }
  SpecialTokens special;
  parse_post_processor(tokenizer.value("post_processor", nlohmann::json()), source, special);
  set_special(std::move(special));
  if (pre_tokenizer_.byte_level()) {
    // A vocabulary token is written in the byte-level alphabet: one code point per byte of text.
    token_bytes_.reserve(by_id.size());
    for (const auto& token : by_id) {
      token_bytes_.push_back(static_cast<uint32_t>(std::count_if(
          token.begin(), token.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; })));
    }
  }
}

int64_t JsonTokenizer::vocab_size() const { return vocab_size_; }

std::string JsonTokenizer::kind() const {
  return (pre_tokenizer_.byte_level() ? "byte-level " : "") + model_->kind() + " (" + source_ + ")";
}

std::optional<int32_t> JsonTokenizer::token_id(std::string_view token) const {
  const auto added = added_by_name_.find(std::string(token));
  if (added != added_by_name_.end()) return added->second;
  const auto found = model_->vocab().find(std::string(token));
  if (found == model_->vocab().end()) return std::nullopt;
  return found->second;
}

std::vector<int32_t> JsonTokenizer::encode_text(std::string_view text) const {
  std::vector<int32_t> ids;
  raw_added_.split(
      text,
      [&](size_t begin, size_t end) {
        encode_plain(text.substr(begin, end - begin), begin == 0, ids);
        return true;
      },
      [&](const AddedToken& added, size_t) { ids.push_back(added.id); });
  return ids;
}

void JsonTokenizer::encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  const std::string normalized = normalizer_.apply(text);
  normalized_added_.split(
      normalized,
      [&](size_t begin, size_t end) {
        if (end <= begin) return true;
        for (const auto& piece : pre_tokenizer_.apply(std::string_view(normalized).substr(begin, end - begin),
                                                      at_start && begin == 0)) {
          model_->encode(piece, out);
        }
        return true;
      },
      [&](const AddedToken& added, size_t) { out.push_back(added.id); });
}

std::optional<Tokenizer::Encoding> JsonTokenizer::encode_text_with_offsets(std::string_view text) const {
  if (!pre_tokenizer_.byte_level()) return std::nullopt;  // "▁" and byte tokens: no byte count per token
  Encoding out;
  out.ids.reserve(text.size() / 3 + 8);  // byte-level BPE of text: about 4 bytes a token
  out.offsets.reserve(text.size() / 3 + 8);
  const bool exact = raw_added_.split(
      text, [&](size_t begin, size_t end) { return encode_plain_with_offsets(text, begin, end, out); },
      [&](const AddedToken& added, size_t position) {
        out.ids.push_back(added.id);
        out.offsets.emplace_back(position, position + added.content.size());
      });
  if (!exact) return std::nullopt;
  return out;
}

bool JsonTokenizer::encode_plain_with_offsets(std::string_view text, size_t begin, size_t end, Encoding& out) const {
  if (end <= begin) return true;
  const std::string_view plain = text.substr(begin, end - begin);
  // A normalizer that changes the text moves characters: offsets would not be the text's.
  if (!normalizer_.is_normalized(plain)) return false;
  return normalized_added_.split(
      plain,
      [&](size_t from, size_t to) {
        if (to <= from) return true;
        size_t at = begin + from;
        for (const auto& piece : pre_tokenizer_.apply(plain.substr(from, to - from), begin + from == 0)) {
          const size_t first = out.ids.size();
          model_->encode(piece, out.ids);
          for (size_t k = first; k < out.ids.size(); ++k) {
            const auto id = static_cast<size_t>(out.ids[k]);
            if (id >= token_bytes_.size()) return false;
            out.offsets.emplace_back(at, at + token_bytes_[id]);
            at += token_bytes_[id];
          }
        }
        return at == begin + to;  // the pieces covered the text exactly (no prefix space added, nothing dropped)
      },
      [&](const AddedToken& added, size_t position) {
        out.ids.push_back(added.id);
        out.offsets.emplace_back(begin + position, begin + position + added.content.size());
      });
}

std::string JsonTokenizer::decode(const std::vector<int32_t>& ids) const {
  // As HF: every id's string, added tokens included, through the decoder chain.
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  const auto& by_id = model_->id_to_token();
  for (const auto id : ids) {
    const auto added = added_by_id_.find(id);
    if (added != added_by_id_.end()) {
      tokens.push_back(added->second);
    } else if (id >= 0 && static_cast<size_t>(id) < by_id.size() && !by_id[static_cast<size_t>(id)].empty()) {
      tokens.push_back(by_id[static_cast<size_t>(id)]);
    }
  }
  return decoder_.decode(std::move(tokens));
}

}  // namespace superoffload::data
