// Pre-tokenizer stages of tokenizer.json.
#include "data/pre_tokenizer.hpp"

#include <array>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "data/regex_pattern.hpp"

namespace superoffload::data {

// ---- byte-level alphabet ---------------------------------------------------------------------

namespace {

std::string utf8(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
  return out;
}

// Printable Latin-1 bytes map to themselves; the other 68 bytes to U+0100 onwards, in order.
const std::array<std::string, 256>& byte_alphabet() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = utf8(printable ? b : next++);
    }
    return t;
  }();
  return table;
}

}  // namespace

const std::string& byte_to_unicode(unsigned char b) { return byte_alphabet()[b]; }

namespace {
// Code point -> byte for the alphabet's characters (all below U+0200), -1 for the others.
const std::array<int, 0x200>& alphabet_inverse() {
  static const auto inverse = [] {
    std::array<int, 0x200> map;
    map.fill(-1);
    for (int b = 0; b < 256; ++b) {
      const auto& s = byte_alphabet()[static_cast<size_t>(b)];
      const uint32_t cp = s.size() == 1 ? static_cast<unsigned char>(s[0])
                                        : ((static_cast<unsigned char>(s[0]) & 0x1Fu) << 6) |
                                              (static_cast<unsigned char>(s[1]) & 0x3Fu);
      map[cp] = b;
    }
    return map;
  }();
  return inverse;
}
}  // namespace

bool append_alphabet_bytes(std::string_view token, std::string& out) {
  const auto& inverse = alphabet_inverse();
  const size_t start = out.size();
  for (size_t i = 0; i < token.size();) {
    const auto c = static_cast<unsigned char>(token[i]);
    uint32_t cp = c;
    if (c >= 0xC0 && c < 0xE0 && i + 1 < token.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3Fu);
      i += 2;
    } else if (c < 0x80) {
      i += 1;
    } else {
      cp = 0x200;  // outside the alphabet
    }
    if (cp >= 0x200 || inverse[cp] < 0) {
      out.resize(start);
      return false;
    }
    out += static_cast<char>(inverse[cp]);
  }
  return true;
}

// ---- pre-tokenizer stages --------------------------------------------------------------------

namespace {

enum class Behavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

// Splits on the matches of a PCRE2 regex, keeping or merging them by HF's behaviours.
class RegexSplit final : public PreTokenizerStage {
 public:
  RegexSplit(const std::string& pattern, bool literal, Behavior behavior, bool invert, const std::string& source)
      : pattern_(pattern, literal, "pre-tokenizer", source), behavior_(behavior), invert_(invert) {}

  void split(std::string_view piece, bool /*at_start*/, std::vector<std::string>& out) const override {
    struct Segment {
      size_t begin, end;
      bool match;
    };
    std::vector<Segment> segments;
    size_t last = 0;
    for (const auto& [begin, end] : pattern_.matches(piece)) {
      if (begin > last) segments.push_back({last, begin, false});
      segments.push_back({begin, end, true});
      last = end;
    }
    if (last < piece.size()) segments.push_back({last, piece.size(), false});
    if (invert_) {
      for (auto& s : segments) s.match = !s.match;
    }
    emit(piece, segments, out);
  }

 private:
  template <class Segments>
  void emit(std::string_view piece, const Segments& segments, std::vector<std::string>& out) const {
    std::string pending;  // for the merging behaviours
    bool pending_match = false;
    auto flush = [&] {
      if (!pending.empty()) out.push_back(std::move(pending));
      pending.clear();
    };
    for (const auto& s : segments) {
      const auto text = piece.substr(s.begin, s.end - s.begin);
      switch (behavior_) {
        case Behavior::isolated:
          out.emplace_back(text);
          break;
        case Behavior::removed:
          if (!s.match) out.emplace_back(text);
          break;
        case Behavior::merged_with_previous:
          if (!s.match) flush();
          pending += text;
          if (s.match) flush();
          break;
        case Behavior::merged_with_next:  // matches (and runs of them) join the next segment
          pending += text;
          if (!s.match) flush();
          break;
        case Behavior::contiguous:
          if (!s.match || !pending_match) flush();
          pending += text;
          pending_match = s.match;
          break;
      }
    }
    flush();
  }

  RegexPattern pattern_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's pre-tokenization regex, used by ByteLevel with use_regex = true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Optionally prefixes a space and splits with GPT-2's regex, then maps bytes to the alphabet.
class ByteLevel final : public PreTokenizerStage {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex, const std::string& source) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<RegexSplit>(kGpt2Pattern, false, Behavior::isolated, false, source);
  }
  void split(std::string_view piece, bool /*at_start*/, std::vector<std::string>& out) const override {
    std::string text(piece);
    if (add_prefix_space_ && !text.empty() && text[0] != ' ') text.insert(text.begin(), ' ');
    std::vector<std::string> parts;
    if (regex_) {
      regex_->split(text, false, parts);
    } else {
      parts.push_back(std::move(text));
    }
    for (const auto& part : parts) {
      std::string mapped;
      mapped.reserve(part.size() * 2);
      for (const char c : part) mapped += byte_to_unicode(static_cast<unsigned char>(c));
      out.push_back(std::move(mapped));
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<RegexSplit> regex_;
};

// SentencePiece's whitespace: spaces become `replacement` ("▁"), which is prepended per
// prepend_scheme ("always", "first": only where the text begins, "never"); with split, each
// "▁" starts a new piece (HF: Metaspace, MergedWithNext).
class Metaspace final : public PreTokenizerStage {
 public:
  enum class Prepend { always, first, never };
  Metaspace(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}
  void split(std::string_view piece, bool at_start, std::vector<std::string>& out) const override {
    std::string text;
    text.reserve(piece.size() + 8);
    for (const char c : piece) {
      if (c == ' ') {
        text += replacement_;
      } else {
        text += c;
      }
    }
    const bool prepend = prepend_ == Prepend::always || (prepend_ == Prepend::first && at_start);
    if (prepend && text.compare(0, replacement_.size(), replacement_) != 0) text.insert(0, replacement_);
    if (!split_) {
      out.push_back(std::move(text));
      return;
    }
    size_t begin = 0;
    for (size_t at = text.find(replacement_, 1); at != std::string::npos; at = text.find(replacement_, at + 1)) {
      if (at > begin) out.push_back(text.substr(begin, at - begin));
      begin = at;
    }
    if (begin < text.size()) out.push_back(text.substr(begin));
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

Metaspace::Prepend parse_prepend_scheme(const nlohmann::json& spec, const std::string& source) {
  if (!spec.contains("prepend_scheme")) {  // files before tokenizers 0.14: add_prefix_space
    return spec.value("add_prefix_space", true) ? Metaspace::Prepend::always : Metaspace::Prepend::never;
  }
  const auto scheme = spec.at("prepend_scheme").get<std::string>();
  if (scheme == "always") return Metaspace::Prepend::always;
  if (scheme == "first") return Metaspace::Prepend::first;
  if (scheme == "never") return Metaspace::Prepend::never;
  SO_FAIL(source << ": Metaspace prepend_scheme \"" << scheme << "\" is not one of always, first, never");
}

Behavior parse_behavior(const std::string& name, const std::string& source) {
  if (name == "Isolated") return Behavior::isolated;
  if (name == "Removed") return Behavior::removed;
  if (name == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (name == "MergedWithNext") return Behavior::merged_with_next;
  if (name == "Contiguous") return Behavior::contiguous;
  SO_FAIL(source << ": unknown Split behavior \"" << name << "\"");
}

void add_stages(const nlohmann::json& spec, const std::string& source,
                std::vector<std::unique_ptr<PreTokenizerStage>>& stages, bool& byte_level) {
  const auto type = spec.value("type", std::string());
  SO_CHECK(!byte_level, source << ": pre-tokenizer stage \"" << type << "\" after ByteLevel is not supported");
  if (type == "Sequence") {
    for (const auto& part : spec.at("pretokenizers")) add_stages(part, source, stages, byte_level);
  } else if (type == "ByteLevel") {
    stages.push_back(std::make_unique<ByteLevel>(spec.value("add_prefix_space", false), spec.value("use_regex", true), source));
    byte_level = true;
  } else if (type == "Split") {
    const auto& pattern = spec.at("pattern");
    const bool literal = pattern.contains("String");
    const auto text = literal ? pattern.at("String").get<std::string>() : pattern.at("Regex").get<std::string>();
    stages.push_back(std::make_unique<RegexSplit>(text, literal, parse_behavior(spec.value("behavior", "Isolated"), source),
                                                  spec.value("invert", false), source));
  } else if (type == "Digits") {
    // HF splits on char::is_numeric: each numeral alone, or runs of them.
    stages.push_back(std::make_unique<RegexSplit>(spec.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)",
                                                  false, Behavior::isolated, false, source));
  } else if (type == "Metaspace") {
    stages.push_back(std::make_unique<Metaspace>(spec.value("replacement", std::string("\u2581")),
                                                 parse_prepend_scheme(spec, source), spec.value("split", true)));
  } else if (type == "Whitespace") {  // HF: the matches of \w+|[^\w\s]+ are the pieces, with Rust's
    // Unicode \w (marks, connector punctuation and joiners included, unlike PCRE2's)
    stages.push_back(std::make_unique<RegexSplit>(
        R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200c}\x{200d}]+|[^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200c}\x{200d}\s]+)",
        false, Behavior::removed, true, source));
  } else if (type == "WhitespaceSplit") {  // HF: cut at char::is_whitespace, which is dropped
    stages.push_back(std::make_unique<RegexSplit>(R"([\s\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]+)",
                                                  false, Behavior::removed, false, source));
  } else if (type == "Punctuation") {  // HF: ASCII punctuation or a Unicode P* character, one by one
    stages.push_back(std::make_unique<RegexSplit>(R"([\p{P}\x{21}-\x{2f}\x{3a}-\x{40}\x{5b}-\x{60}\x{7b}-\x{7e}])",
                                                  false, parse_behavior(spec.value("behavior", "Isolated"), source),
                                                  false, source));
  } else {
    SO_FAIL(source << ": pre-tokenizer \"" << type
                   << "\" is not supported (supported: ByteLevel, Split, Digits, Metaspace, Whitespace, WhitespaceSplit, "
                      "Punctuation, Sequence)");
  }
}

}  // namespace

PreTokenizer::PreTokenizer(const nlohmann::json& spec, const std::string& source) {
  if (!spec.is_null()) add_stages(spec, source, stages_, byte_level_);
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;

std::vector<std::string> PreTokenizer::apply(std::string_view text, bool at_start) const {
  std::vector<std::string> pieces{std::string(text)}, next;
  for (const auto& stage : stages_) {
    next.clear();
    for (size_t i = 0; i < pieces.size(); ++i) stage->split(pieces[i], at_start && i == 0, next);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace superoffload::data
