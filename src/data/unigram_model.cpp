// UnigramModel: Viterbi segmentation as HF's `tokenizers` does it (its encode_optimized).
#include "data/unigram_model.hpp"

#include <limits>
#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace superoffload::data {

namespace {
// HF's (and SentencePiece's) penalty of an unknown character below the lowest piece score.
constexpr double kUnknownPenalty = 10.0;
}  // namespace

UnigramModel::UnigramModel(const nlohmann::json& model, const std::string& source) {
  SO_CHECK(model.at("vocab").is_array(), source << ": a Unigram model.vocab is a list of [piece, score]");
  double lowest = std::numeric_limits<double>::infinity();
  int64_t id = 0;
  for (const auto& entry : model.at("vocab")) {
    SO_CHECK(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_number(),
             source << ": Unigram vocabulary entry " << id << " is " << entry.dump().substr(0, 80)
                    << ", not [piece, score]");
    const auto piece = entry[0].get<std::string>();
    add_token(piece, id, source);
    scores_.push_back(entry[1].get<double>());
    lowest = std::min(lowest, scores_.back());
    longest_piece_ = std::max(longest_piece_, piece.size());
    ++id;
  }
  SO_CHECK(id > 0, source << ": the Unigram vocabulary is empty");
  unk_score_ = lowest - kUnknownPenalty;
  if (model.contains("unk_id") && !model["unk_id"].is_null()) {
    const int32_t unk = token_id_value(model["unk_id"], source, "model.unk_id");
    SO_CHECK(unk < id, source << ": model.unk_id " << unk << " is outside the vocabulary of " << id);
    unk_ = unk;
  }
  byte_fallback_ = model.value("byte_fallback", false);
  if (byte_fallback_) find_byte_tokens();
}

void UnigramModel::encode(const std::string& piece, std::vector<int32_t>& out) const {
  const size_t size = piece.size();
  if (size == 0) return;
  struct Node {
    int32_t id = -1;
    int64_t starts_at = -1;
    double score = 0;
  };
  std::vector<Node> best(size + 1);
  best[0].starts_at = 0;
  std::string key;
  for (size_t start = 0; start < size;) {
    const size_t char_length = std::min(utf8_length(static_cast<unsigned char>(piece[start])), size - start);
    const double here = best[start].score;
    bool single = false;
    // Every vocabulary piece that starts here, shortest first (HF walks a trie in that order).
    for (size_t end = start + 1; end <= size && end - start <= longest_piece_; ++end) {
      if (end < size && (static_cast<unsigned char>(piece[end]) & 0xC0) == 0x80) continue;  // inside a character
      key.assign(piece, start, end - start);
      const auto found = vocab_.find(key);
      if (found == vocab_.end()) continue;
      const double candidate = here + scores_[static_cast<size_t>(found->second)];
      Node& target = best[end];
      if (target.starts_at < 0 || candidate > target.score) target = {found->second, static_cast<int64_t>(start), candidate};
      if (end - start == char_length) single = true;
    }
    if (!single) {
      Node& target = best[start + char_length];
      const double candidate = here + unk_score_;
      if (target.starts_at < 0 || candidate > target.score) {
        target = {unk_.value_or(-1), static_cast<int64_t>(start), candidate};
      }
    }
    start += char_length;
  }
  // Back from the end; unknown stretches next to each other are fused.
  std::vector<std::pair<size_t, size_t>> spans;  // [begin, end) of each result, last first
  std::vector<int32_t> ids;
  for (size_t end = size; end > 0;) {
    const Node& node = best[end];
    const auto begin = static_cast<size_t>(node.starts_at);
    const bool unknown = node.id < 0 || (unk_ && node.id == *unk_);
    if (unknown && !ids.empty() && ids.back() == -1) {
      spans.back().first = begin;
    } else {
      spans.emplace_back(begin, end);
      ids.push_back(unknown ? -1 : node.id);
    }
    end = begin;
  }
  for (size_t k = ids.size(); k-- > 0;) {
    if (ids[k] >= 0) {
      out.push_back(ids[k]);
      continue;
    }
    const auto text = std::string_view(piece).substr(spans[k].first, spans[k].second - spans[k].first);
    // A fused stretch may itself be a vocabulary piece (HF looks it up again).
    const auto found = vocab_.find(std::string(text));
    if (found != vocab_.end()) {
      out.push_back(found->second);
    } else if (!(byte_fallback_ && append_bytes(text, out))) {
      SO_CHECK(unk_.has_value(), "the text \"" << text << "\" is not in the Unigram vocabulary, which has no unk_id");
      out.push_back(*unk_);
    }
  }
}

}  // namespace superoffload::data
