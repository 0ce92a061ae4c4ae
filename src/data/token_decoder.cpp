// Decoder steps of tokenizer.json, each as HF `tokenizers` applies it to the list of tokens.
#include "data/token_decoder.hpp"

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "data/pre_tokenizer.hpp"
#include "data/regex_pattern.hpp"

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
  ReplaceDecode(const nlohmann::json& pattern, std::string content, const std::string& source)
      : pattern_(pattern, "decoder Replace", source), content_(std::move(content)) {}
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    for (auto& token : tokens) token = pattern_.replace_all(token, content_);
    return tokens;
  }

 private:
  RegexPattern pattern_;
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
    steps.push_back(std::make_unique<ReplaceDecode>(spec.at("pattern"), spec.at("content").get<std::string>(), source));
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
