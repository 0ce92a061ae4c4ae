// BpeModel: HF's BPE (its merge_word) with an O(n log n) merge loop and a piece cache.
#include "data/bpe_model.hpp"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <queue>

#include "base/error.hpp"

namespace superoffload::data {

namespace {

// Pieces longer than this are tokenized but not cached.
constexpr size_t kMaxCachedPieceBytes = 256;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}


}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, const std::string& source) : source_(source) {
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    SO_CHECK(!model.contains(key) || model[key].is_null() || model[key].get<std::string>().empty(),
             source << ": BPE with " << key << " is not supported (an encoder's word-piece convention)");
  }
  SO_CHECK(!model.contains("dropout") || model["dropout"].is_null(),
           source << ": BPE dropout is a training-time augmentation and is not supported");
  SO_CHECK(model.at("vocab").is_object(), source << ": model.vocab is not an object of token → id");
  for (const auto& [token, id] : model.at("vocab").items()) add_token(token, id, source);
  SO_CHECK(!vocab_.empty(), source << ": the vocabulary is empty");

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
  byte_fallback_ = model.value("byte_fallback", false);
  fuse_unk_ = model.value("fuse_unk", false);
  if (byte_fallback_) find_byte_tokens();
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const auto unk = vocab_.find(model["unk_token"].get<std::string>());
    SO_CHECK(unk != vocab_.end(), source << ": model.unk_token \"" << model["unk_token"].get<std::string>()
                                         << "\" is not in the vocabulary");
    unk_ = unk->second;
  }
}

// HF's order of symbols: each character's token; a character outside the vocabulary as its
// bytes' "<0xXX>" tokens (byte_fallback), else as the unk token — a run of unknown characters
// as one with fuse_unk. (As in HF, a pending unk is written only when a known character or
// the end follows, after any byte tokens in between.)
void BpeModel::symbols_of(const std::string& piece, std::vector<int32_t>& symbols) const {
  bool unknown_pending = false;
  for (size_t i = 0; i < piece.size();) {
    const size_t length = std::min(utf8_length(static_cast<unsigned char>(piece[i])), piece.size() - i);
    const std::string_view character(piece.data() + i, length);
    i += length;
    const auto found = vocab_.find(std::string(character));
    if (found != vocab_.end()) {
      if (unknown_pending) symbols.push_back(*unk_);
      unknown_pending = false;
      symbols.push_back(found->second);
      continue;
    }
    if (byte_fallback_ && append_bytes(character, symbols)) continue;
    SO_CHECK(unk_.has_value(), source_ << ": the character \"" << character
                                       << "\" is not in the vocabulary and there is no unk_token");
    if (unknown_pending && !fuse_unk_) symbols.push_back(*unk_);
    unknown_pending = true;
  }
  if (unknown_pending) symbols.push_back(*unk_);
}

void BpeModel::encode(const std::string& piece, std::vector<int32_t>& out) const {
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
  symbols_of(piece, symbols);
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
void BpeModel::merge_symbols(std::vector<int32_t>& symbols) const {
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

}  // namespace superoffload::data
