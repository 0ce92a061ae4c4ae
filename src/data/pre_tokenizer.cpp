// Normalizer and pre-tokenizer stages of tokenizer.json.
#include "data/pre_tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <array>
#include <nlohmann/json.hpp>

#include "base/error.hpp"

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

std::string unicode_to_bytes(std::string_view text) {
  // Alphabet characters are 1-2 byte UTF-8 sequences; map them back, keep anything else.
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
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    uint32_t cp = c;
    size_t length = 1;
    if (c >= 0xC0 && c < 0xE0 && i + 1 < text.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      length = 2;
    } else if (c >= 0xE0) {
      length = c >= 0xF0 ? 4 : 3;
      cp = 0x200;  // outside the alphabet
    }
    if (cp < 0x200 && inverse[cp] >= 0) {
      out += static_cast<char>(inverse[cp]);
    } else {
      out.append(text.substr(i, length));
    }
    i += length;
  }
  return out;
}

// ---- normalizer ------------------------------------------------------------------------------

Normalizer::Normalizer(const nlohmann::json& spec, const std::string& source) {
  if (spec.is_null()) return;
  const auto type = spec.value("type", std::string());
  if (type == "NFC") {
    nfc_ = true;
  } else if (type == "Sequence") {
    for (const auto& part : spec.at("normalizers")) {
      const Normalizer inner(part, source);
      nfc_ = nfc_ || inner.nfc_;
    }
  } else {
    SO_FAIL(source << ": normalizer \"" << type << "\" is not supported (supported: none, NFC)"
                   << hint("byte-level BPE tokenizers (GPT-2, Llama 3, Qwen) use none or NFC; for SentencePiece "
                           "models, keep tokenizer.model in the directory and remove tokenizer.json"));
  }
}

std::string Normalizer::apply(std::string_view text) const {
  if (!nfc_) return std::string(text);
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  SO_CHECK(U_SUCCESS(status), "ICU's NFC normalizer is unavailable: " << u_errorName(status));
  const auto input = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (nfc->isNormalized(input, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  const auto normalized = nfc->normalize(input, status);
  SO_CHECK(U_SUCCESS(status), "NFC normalization failed: " << u_errorName(status));
  std::string out;
  normalized.toUTF8String(out);
  return out;
}

bool Normalizer::is_normalized(std::string_view text) const {
  if (!nfc_) return true;
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  SO_CHECK(U_SUCCESS(status), "ICU's NFC normalizer is unavailable: " << u_errorName(status));
  const auto input = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  const bool normalized = nfc->isNormalized(input, status);
  return U_SUCCESS(status) && normalized;
}

// ---- pre-tokenizer stages --------------------------------------------------------------------

namespace {

enum class Behavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

// Splits on the matches of a PCRE2 regex, keeping or merging them by HF's behaviours.
class RegexSplit final : public PreTokenizerStage {
 public:
  RegexSplit(const std::string& pattern, bool literal, Behavior behavior, bool invert, const std::string& source)
      : behavior_(behavior), invert_(invert) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0u);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &code, &offset, nullptr);
    if (code_ == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(code, message.data(), message.size());
      SO_FAIL(source << ": the pre-tokenizer regex does not compile at offset " << offset << ": "
                     << reinterpret_cast<const char*>(message.data()) << " (pattern: " << pattern << ")");
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  }
  ~RegexSplit() override { pcre2_code_free(code_); }
  RegexSplit(const RegexSplit&) = delete;
  RegexSplit& operator=(const RegexSplit&) = delete;

  void split(std::string_view piece, std::vector<std::string>& out) const override {
    struct Segment {
      size_t begin, end;
      bool match;
    };
    std::vector<Segment> segments;
    pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_, nullptr);
    SO_CHECK(data != nullptr, "out of memory for regex match data");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    size_t position = 0, last = 0;
    uint32_t options = 0;
    while (position <= piece.size()) {
      const int rc = pcre2_match(code_, subject, piece.size(), position, options, data, nullptr);
      options = PCRE2_NO_UTF_CHECK;  // the subject was validated by the first call
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        pcre2_match_data_free(data);
        SO_FAIL("the pre-tokenizer regex failed on the text (PCRE2 error " << rc << ")"
                                                                           << hint("the text must be valid UTF-8"));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
      const size_t begin = ovector[0], end = ovector[1];
      if (end == begin) {  // an empty match splits nothing; step over one character
        position = begin + 1;
        while (position < piece.size() && (static_cast<unsigned char>(piece[position]) & 0xC0) == 0x80) ++position;
        continue;
      }
      if (begin > last) segments.push_back({last, begin, false});
      segments.push_back({begin, end, true});
      last = position = end;
    }
    pcre2_match_data_free(data);
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

  pcre2_code* code_ = nullptr;
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
  void split(std::string_view piece, std::vector<std::string>& out) const override {
    std::string text(piece);
    if (add_prefix_space_ && !text.empty() && text[0] != ' ') text.insert(text.begin(), ' ');
    std::vector<std::string> parts;
    if (regex_) {
      regex_->split(text, parts);
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
  } else {
    SO_FAIL(source << ": pre-tokenizer \"" << type << "\" is not supported (supported: ByteLevel, Split, Digits, Sequence)"
                   << hint("byte-level BPE tokenizers (GPT-2, Llama 3, Qwen) use these; for SentencePiece models keep "
                           "tokenizer.model in the directory and remove tokenizer.json"));
  }
}

}  // namespace

PreTokenizer::PreTokenizer(const nlohmann::json& spec, const std::string& source) {
  bool byte_level = false;
  SO_CHECK(!spec.is_null(), source << ": a byte-level BPE tokenizer needs a ByteLevel pre-tokenizer, and this one has none");
  add_stages(spec, source, stages_, byte_level);
  SO_CHECK(byte_level, source << ": the pre-tokenizer has no ByteLevel stage; only byte-level BPE is supported from "
                              << "tokenizer.json" << hint("for SentencePiece models keep tokenizer.model in the directory"));
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;

std::vector<std::string> PreTokenizer::apply(std::string_view text) const {
  std::vector<std::string> pieces{std::string(text)}, next;
  for (const auto& stage : stages_) {
    next.clear();
    for (const auto& piece : pieces) stage->split(piece, next);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace superoffload::data
