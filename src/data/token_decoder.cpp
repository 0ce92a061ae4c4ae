// Decoder steps of tokenizer.json, each as HF `tokenizers` applies it to the list of tokens.
#include "data/token_decoder.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "data/pre_tokenizer.hpp"

namespace superoffload::data {

namespace {

bool valid_utf8(const std::string& bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    const size_t length = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (length == 0 || i + length > bytes.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((static_cast<unsigned char>(bytes[i + k]) & 0xC0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

// The byte alphabet undone, token by token as HF does: a token wholly in the alphabet becomes
// its bytes, any other (an added token such as "<｜begin▁of▁sentence｜>") stays as written.
class ByteLevelDecode final : public TokenDecoder::Step {
 public:
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    std::string out;
    for (const auto& token : tokens) {
      if (!append_alphabet_bytes(token, out)) out += token;
    }
    return {out};
  }
};

// "▁" back to a space; the first token loses the space its prefix added (unless "never").
class MetaspaceDecode final : public TokenDecoder::Step {
 public:
  MetaspaceDecode(std::string replacement, bool strip_first) : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const auto& token = tokens[i];
      for (size_t at = 0; at < token.size();) {
        if (token.compare(at, replacement_.size(), replacement_) == 0) {
          out += ' ';
          at += replacement_.size();
        } else {
          out += token[at++];
        }
      }
      if (i == 0 && strip_first_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class ReplaceDecode final : public TokenDecoder::Step {
 public:
  ReplaceDecode(const std::string& pattern, bool literal, std::string content, const std::string& source)
      : content_(std::move(content)) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &code, &offset, nullptr);
    if (code_ == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(code, message.data(), message.size());
      SO_FAIL(source << ": decoder Replace: the pattern does not compile at offset " << offset << ": "
                     << reinterpret_cast<const char*>(message.data()) << " (pattern: " << pattern << ")");
    }
  }
  ~ReplaceDecode() override { pcre2_code_free(code_); }
  ReplaceDecode(const ReplaceDecode&) = delete;
  ReplaceDecode& operator=(const ReplaceDecode&) = delete;

  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_, nullptr);
    SO_CHECK(data != nullptr, "out of memory for regex match data");
    for (auto& token : tokens) {
      std::string out;
      size_t position = 0, last = 0;
      while (position <= token.size()) {
        if (pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(token.data()), token.size(), position, 0, data, nullptr) < 0) break;
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
        if (ovector[1] == ovector[0]) {
          position = ovector[0] + 1;
          continue;
        }
        out.append(token, last, ovector[0] - last);
        out += content_;
        last = position = ovector[1];
      }
      out.append(token, last, std::string::npos);
      token = std::move(out);
    }
    pcre2_match_data_free(data);
    return tokens;
  }

 private:
  pcre2_code* code_ = nullptr;
  std::string content_;
};

// Runs of "<0xXX>" tokens become their bytes when those are valid UTF-8, else one U+FFFD per byte.
class ByteFallbackDecode final : public TokenDecoder::Step {
 public:
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t pending = 0;
    auto flush = [&] {
      if (pending == 0) return;
      if (valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < pending; ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      pending = 0;
    };
    for (auto& token : tokens) {
      int value = -1;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
        const auto hex = [](char c) {
          return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        };
        const int high = hex(token[3]), low = hex(token[4]);
        if (high >= 0 && low >= 0) value = high * 16 + low;
      }
      if (value >= 0) {
        bytes += static_cast<char>(value);
        ++pending;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    return out;
  }
};

class FuseDecode final : public TokenDecoder::Step {
 public:
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    std::string out;
    for (const auto& token : tokens) out += token;
    return {out};
  }
};

// Up to `start` leading and `stop` trailing copies of one character removed from each token.
class StripDecode final : public TokenDecoder::Step {
 public:
  StripDecode(std::string content, size_t start, size_t stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    for (auto& token : tokens) {
      size_t begin = 0, end = token.size();
      for (size_t k = 0; k < start_ && token.compare(begin, content_.size(), content_) == 0 && begin < end; ++k) {
        begin += content_.size();
      }
      for (size_t k = 0; k < stop_ && end >= begin + content_.size() &&
                         token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++k) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
    return tokens;
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

void add_steps(const nlohmann::json& spec, const std::string& source, std::vector<std::unique_ptr<TokenDecoder::Step>>& steps) {
  const auto type = spec.value("type", std::string());
  if (type == "Sequence") {
    for (const auto& part : spec.at("decoders")) add_steps(part, source, steps);
  } else if (type == "ByteLevel") {
    steps.push_back(std::make_unique<ByteLevelDecode>());
  } else if (type == "Metaspace") {
    const bool strip_first = spec.contains("prepend_scheme") ? spec.at("prepend_scheme").get<std::string>() != "never"
                                                             : spec.value("add_prefix_space", true);
    steps.push_back(std::make_unique<MetaspaceDecode>(spec.value("replacement", std::string("\u2581")), strip_first));
  } else if (type == "Replace") {
    const auto& pattern = spec.at("pattern");
    const bool literal = pattern.contains("String");
    steps.push_back(std::make_unique<ReplaceDecode>(literal ? pattern.at("String").get<std::string>()
                                                            : pattern.at("Regex").get<std::string>(),
                                                    literal, spec.at("content").get<std::string>(), source));
  } else if (type == "ByteFallback") {
    steps.push_back(std::make_unique<ByteFallbackDecode>());
  } else if (type == "Fuse") {
    steps.push_back(std::make_unique<FuseDecode>());
  } else if (type == "Strip") {
    steps.push_back(std::make_unique<StripDecode>(spec.at("content").get<std::string>(), spec.value("start", size_t{0}),
                                                  spec.value("stop", size_t{0})));
  } else {
    SO_FAIL(source << ": decoder \"" << type
                   << "\" is not supported (supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and a "
                      "Sequence of them)");
  }
}

}  // namespace

TokenDecoder::TokenDecoder(const nlohmann::json& spec, bool byte_level, const std::string& source) {
  if (!spec.is_null()) {
    add_steps(spec, source, steps_);
  } else if (byte_level) {
    steps_.push_back(std::make_unique<ByteLevelDecode>());
  } else {
    join_with_spaces_ = true;
  }
}

TokenDecoder::~TokenDecoder() = default;
TokenDecoder::TokenDecoder(TokenDecoder&&) noexcept = default;

std::string TokenDecoder::decode(std::vector<std::string> tokens) const {
  for (const auto& step : steps_) tokens = step->apply(std::move(tokens));
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (join_with_spaces_ && i > 0) out += ' ';
    out += tokens[i];
  }
  return out;
}

}  // namespace superoffload::data
