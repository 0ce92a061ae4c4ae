// ByteLevelBpe.
#include "data/byte_level_bpe.hpp"

#include <algorithm>
#include <functional>
#include <queue>
#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace superoffload::data {
namespace {

// Pieces longer than this are tokenized but not cached.
constexpr size_t kMaxCachedPieceBytes = 256;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (c & 0x80); }

// Token ids are array indices here (id → token) and embedding rows in the model: each must be
// a non-negative integer, and below a bound that keeps the id table allocatable (2^24 is 64
// times the largest vocabulary published).
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

int32_t token_id_value(const nlohmann::json& value, const std::string& source, const std::string& what) {
  SO_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < kMaxTokenId,
           source << ": " << what << " has id " << value.dump() << "; token ids are integers in [0, " << kMaxTokenId
                  << ")" << hint("the tokenizer file is corrupt or was edited by hand; take it from the base model"));
  return static_cast<int32_t>(value.get<int64_t>());
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

ByteLevelBpe::ByteLevelBpe(const nlohmann::json& tokenizer, const std::string& source)
    : source_(source),
      normalizer_(tokenizer.value("normalizer", nlohmann::json()), source),
      pre_tokenizer_(tokenizer.value("pre_tokenizer", nlohmann::json()), source) {
  const auto& model = tokenizer.at("model");
  const auto type = model.value("type", std::string("BPE"));
  SO_CHECK(type == "BPE", source << ": model type \"" << type << "\" is not supported; only byte-level BPE is read "
                                 << "from tokenizer.json" << hint("for SentencePiece models keep tokenizer.model"));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    SO_CHECK(!model.contains(key) || model[key].is_null() || model[key].get<std::string>().empty(),
             source << ": BPE with " << key << " is not supported (not a byte-level BPE)");
  }
  SO_CHECK(!model.contains("dropout") || model["dropout"].is_null(),
           source << ": BPE dropout is a training-time augmentation and is not supported");

  SO_CHECK(model.at("vocab").is_object(), source << ": model.vocab is not an object of token → id");
  int32_t max_id = -1;
  std::unordered_map<int32_t, std::string> token_of;  // to name both tokens of a duplicate id
  for (const auto& [token, id_value] : model.at("vocab").items()) {
    const int32_t id = token_id_value(id_value, source, "vocabulary token \"" + token + "\"");
    const auto [other, fresh] = token_of.emplace(id, token);
    SO_CHECK(fresh, source << ": vocabulary tokens \"" << other->second << "\" and \"" << token << "\" share id " << id
                           << hint("each id names one token; the file is corrupt"));
    vocab_.emplace(token, id);
    max_id = std::max(max_id, id);
  }
  for (const auto& added : tokenizer.value("added_tokens", nlohmann::json::array())) {
    const auto content = added.at("content").get<std::string>();
    AddedToken t{content, token_id_value(added.at("id"), source, "added token \"" + content + "\""),
                 added.value("lstrip", false), added.value("rstrip", false), added.value("single_word", false)};
    SO_CHECK(!t.content.empty(), source << ": added token " << t.id << " is empty");
    // GPT-2 style files list "<|endoftext|>" in the vocabulary and as an added token with the
    // same id; an added token taking another token's id would make decoding ambiguous.
    const auto vocab_token = token_of.find(t.id);
    SO_CHECK(vocab_token == token_of.end() || vocab_token->second == t.content,
             source << ": added token \"" << t.content << "\" has id " << t.id << ", which the vocabulary gives to \""
                    << vocab_token->second << "\"" << hint("each id names one token; the file is corrupt"));
    const auto [other, fresh] = added_by_id_.emplace(t.id, t.content);
    SO_CHECK(fresh, source << ": added tokens \"" << other->second << "\" and \"" << t.content << "\" share id " << t.id
                           << hint("each id names one token; the file is corrupt"));
    max_id = std::max(max_id, t.id);
    added_first_byte_[static_cast<unsigned char>(t.content[0])] = true;
    added_.push_back(std::move(t));
  }
  SO_CHECK(max_id >= 0, source << ": the vocabulary is empty");
  std::stable_sort(added_.begin(), added_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : vocab_) id_to_token_[static_cast<size_t>(id)] = token;

  SO_CHECK(model.at("merges").is_array(), source << ": model.merges must be a list of merges, not "
                                                  << model.at("merges").dump().substr(0, 80));
  int32_t rank = 0;
  for (const auto& merge : model.at("merges")) {
    std::string left, right;
    if (merge.is_array()) {  // tokenizers >= 0.20: ["a", "b"]
      left = merge.at(0).get<std::string>();
      right = merge.at(1).get<std::string>();
    } else {  // "a b"
      const auto text = merge.get<std::string>();
      const auto space = text.find(' ');
      SO_CHECK(space != std::string::npos && text.find(' ', space + 1) == std::string::npos,
               source << ": merge " << rank << " \"" << text << "\" is not two tokens separated by one space");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    }
    const auto a = vocab_.find(left), b = vocab_.find(right), merged = vocab_.find(left + right);
    SO_CHECK(a != vocab_.end() && b != vocab_.end() && merged != vocab_.end(),
             source << ": merge " << rank << " (\"" << left << "\", \"" << right << "\") uses tokens not in the vocabulary");
    merges_.emplace(pair_key(a->second, b->second), std::make_pair(rank, merged->second));
    ++rank;
  }
  ignore_merges_ = model.value("ignore_merges", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const auto unk = vocab_.find(model["unk_token"].get<std::string>());
    if (unk != vocab_.end()) unk_ = unk->second;
  }
  SpecialTokens special;
  parse_post_processor(tokenizer.value("post_processor", nlohmann::json()), source, special);
  set_special(std::move(special));
  // A vocabulary token is written in the byte-level alphabet: one code point per byte of text.
  token_bytes_.reserve(id_to_token_.size());
  for (const auto& token : id_to_token_) {
    token_bytes_.push_back(static_cast<uint32_t>(
        std::count_if(token.begin(), token.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; })));
  }
}

int64_t ByteLevelBpe::vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }

std::optional<int32_t> ByteLevelBpe::token_id(std::string_view token) const {
  for (const auto& added : added_) {
    if (added.content == token) return added.id;
  }
  const auto found = vocab_.find(std::string(token));
  if (found == vocab_.end()) return std::nullopt;
  return found->second;
}

const ByteLevelBpe::AddedToken* ByteLevelBpe::added_at(std::string_view text, size_t position) const {
  if (!added_first_byte_[static_cast<unsigned char>(text[position])]) return nullptr;
  for (const auto& added : added_) {  // longest first
    if (text.compare(position, added.content.size(), added.content) != 0) continue;
    if (added.single_word) {
      const size_t end = position + added.content.size();
      if ((position > 0 && is_word_char(text[position - 1])) || (end < text.size() && is_word_char(text[end]))) continue;
    }
    return &added;
  }
  return nullptr;
}

bool ByteLevelBpe::split_at_added(std::string_view text, const std::function<bool(size_t, size_t)>& plain,
                                  const std::function<void(const AddedToken&, size_t)>& added_token) const {
  size_t plain_begin = 0, position = 0;
  while (position < text.size()) {
    const AddedToken* added = added_at(text, position);
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

std::vector<int32_t> ByteLevelBpe::encode_text(std::string_view text) const {
  std::vector<int32_t> ids;
  split_at_added(
      text,
      [&](size_t begin, size_t end) {
        encode_plain(text.substr(begin, end - begin), ids);
        return true;
      },
      [&](const AddedToken& added, size_t) { ids.push_back(added.id); });
  return ids;
}

std::optional<Tokenizer::Encoding> ByteLevelBpe::encode_text_with_offsets(std::string_view text) const {
  Encoding out;
  out.ids.reserve(text.size() / 3 + 8);  // byte-level BPE of text: about 4 bytes a token
  out.offsets.reserve(text.size() / 3 + 8);
  const bool exact = split_at_added(
      text, [&](size_t begin, size_t end) { return encode_plain_with_offsets(text, begin, end, out); },
      [&](const AddedToken& added, size_t position) {
        out.ids.push_back(added.id);
        out.offsets.emplace_back(position, position + added.content.size());
      });
  if (!exact) return std::nullopt;
  return out;
}

bool ByteLevelBpe::encode_plain_with_offsets(std::string_view text, size_t begin, size_t end, Encoding& out) const {
  if (end <= begin) return true;
  const std::string_view plain = text.substr(begin, end - begin);
  if (!normalizer_.is_normalized(plain)) return false;  // NFC would move characters: offsets would not be the text's
  size_t at = begin;
  for (const auto& piece : pre_tokenizer_.apply(plain)) {
    const size_t first = out.ids.size();
    encode_piece(piece, out.ids);
    for (size_t k = first; k < out.ids.size(); ++k) {
      const int32_t id = out.ids[k];
      if (id < 0 || static_cast<size_t>(id) >= token_bytes_.size()) return false;
      out.offsets.emplace_back(at, at + token_bytes_[static_cast<size_t>(id)]);
      at += token_bytes_[static_cast<size_t>(id)];
    }
  }
  return at == end;  // the pieces covered the text exactly (no prefix space added, nothing dropped)
}

void ByteLevelBpe::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  for (const auto& piece : pre_tokenizer_.apply(normalizer_.apply(text))) encode_piece(piece, out);
}

void ByteLevelBpe::encode_piece(const std::string& piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {  // Llama 3: a piece that is a whole token is taken as is
    const auto whole = vocab_.find(piece);
    if (whole != vocab_.end()) {
      out.push_back(whole->second);
      return;
    }
  }
  {
    const std::lock_guard lock(cache_mutex_);
    const auto cached = cache_.find(piece);
    if (cached != cache_.end()) {
      out.insert(out.end(), cached->second.begin(), cached->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols;
  for (size_t i = 0; i < piece.size();) {
    const size_t length = std::min(utf8_length(static_cast<unsigned char>(piece[i])), piece.size() - i);
    const auto found = vocab_.find(piece.substr(i, length));
    if (found != vocab_.end()) {
      symbols.push_back(found->second);
    } else {
      SO_CHECK(unk_.has_value(), source_ << ": the character \"" << piece.substr(i, length)
                                         << "\" is not in the vocabulary and there is no unk_token");
      symbols.push_back(*unk_);
    }
    i += length;
  }
  merge_symbols(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (piece.size() > kMaxCachedPieceBytes) return;  // a blob seen once; caching it only costs memory
  const std::lock_guard lock(cache_mutex_);
  if (cache_.size() > (1u << 18)) cache_.clear();
  cache_.emplace(piece, std::move(symbols));
}

// HF's order: repeatedly merge the adjacent pair of lowest rank, the leftmost one on ties.
// Rescanning the word for every merge is quadratic in its length (a 80,000-character base64
// blob took 42 s), so the candidate pairs wait in a min-heap keyed by (rank, position) over a
// linked list of symbols: O(n log n). A merge invalidates its neighbours' entries lazily —
// an entry is acted on only if both of its symbols are still the ones it was made for.
void ByteLevelBpe::merge_symbols(std::vector<int32_t>& symbols) const {
  const auto n = static_cast<int32_t>(symbols.size());
  if (n < 2) return;
  struct Candidate {
    int32_t rank, position, left, right, merged;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };
  std::vector<int32_t> next(static_cast<size_t>(n)), previous(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
    previous[static_cast<size_t>(i)] = i - 1;
  }
  std::vector<bool> alive(static_cast<size_t>(n), true);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto offer = [&](int32_t position) {
    if (position < 0) return;
    const int32_t right = next[static_cast<size_t>(position)];
    if (right < 0) return;
    const int32_t a = symbols[static_cast<size_t>(position)], b = symbols[static_cast<size_t>(right)];
    const auto merge = merges_.find(pair_key(a, b));
    if (merge != merges_.end()) heap.push({merge->second.first, position, a, b, merge->second.second});
  };
  for (int32_t i = 0; i + 1 < n; ++i) offer(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const auto at = static_cast<size_t>(top.position);
    const int32_t right = next[at];
    if (!alive[at] || right < 0 || symbols[at] != top.left || symbols[static_cast<size_t>(right)] != top.right) continue;
    symbols[at] = top.merged;
    alive[static_cast<size_t>(right)] = false;
    next[at] = next[static_cast<size_t>(right)];
    if (next[at] >= 0) previous[static_cast<size_t>(next[at])] = top.position;
    offer(previous[at]);
    offer(top.position);
  }
  size_t kept = 0;
  for (int32_t i = 0; i >= 0; i = next[static_cast<size_t>(i)]) symbols[kept++] = symbols[static_cast<size_t>(i)];
  symbols.resize(kept);
}

std::string ByteLevelBpe::decode(const std::vector<int32_t>& ids) const {
  std::string out, pending;  // pending: vocabulary text in the byte alphabet
  for (const auto id : ids) {
    const auto added = added_by_id_.find(id);
    if (added != added_by_id_.end()) {
      out += unicode_to_bytes(pending);
      pending.clear();
      out += added->second;
    } else if (id >= 0 && static_cast<size_t>(id) < id_to_token_.size()) {
      pending += id_to_token_[static_cast<size_t>(id)];
    }
  }
  return out + unicode_to_bytes(pending);
}

}  // namespace superoffload::data
