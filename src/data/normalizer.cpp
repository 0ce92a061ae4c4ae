// Normalizer steps of tokenizer.json.
#include "data/normalizer.hpp"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "data/regex_pattern.hpp"

namespace superoffload::data {

namespace {

icu::UnicodeString to_unicode(const std::string& text) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
}

std::string to_utf8(const icu::UnicodeString& text) {
  std::string out;
  text.toUTF8String(out);
  return out;
}

// NFC, NFD, NFKC, NFKD: ICU's normalizers (the same Unicode tables HF's unicode-normalization
// crate implements). Text already in the form is returned as is.
class UnicodeForm final : public Normalizer::Step {
 public:
  explicit UnicodeForm(const std::string& form) : form_(form) {}
  std::string apply(std::string text) const override {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* normalizer = form_ == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                                         : form_ == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                                         : form_ == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                                           : icu::Normalizer2::getNFKDInstance(status);
    SO_CHECK(U_SUCCESS(status), "ICU's " << form_ << " normalizer is unavailable: " << u_errorName(status));
    const auto input = to_unicode(text);
    if (normalizer->isNormalized(input, status) && U_SUCCESS(status)) return text;
    status = U_ZERO_ERROR;
    const auto normalized = normalizer->normalize(input, status);
    SO_CHECK(U_SUCCESS(status), form_ << " normalization failed: " << u_errorName(status));
    return to_utf8(normalized);
  }

 private:
  std::string form_;
};

// Unicode's default full lower-casing, no locale, one character at a time as HF does (Rust's
// char::to_lowercase: "İ" becomes two code points, and a final Σ becomes σ, not ς).
class Lowercase final : public Normalizer::Step {
 public:
  std::string apply(std::string text) const override {
    const auto unicode = to_unicode(text);
    icu::UnicodeString out;
    for (int32_t i = 0; i < unicode.length(); i = unicode.moveIndex32(i, 1)) {
      icu::UnicodeString one(unicode.char32At(i));
      out += one.toLower(icu::Locale::getRoot());
    }
    return to_utf8(out);
  }
};

// Removes leading and/or trailing white space (Unicode White_Space, as Rust's char::is_whitespace).
class Strip final : public Normalizer::Step {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string apply(std::string text) const override {
    auto unicode = to_unicode(text);
    int32_t begin = 0, end = unicode.length();
    if (left_) {
      while (begin < end && u_isUWhiteSpace(unicode.char32At(begin))) begin = unicode.moveIndex32(begin, 1);
    }
    if (right_) {
      while (end > begin) {
        const int32_t previous = unicode.moveIndex32(end, -1);
        if (!u_isUWhiteSpace(unicode.char32At(previous))) break;
        end = previous;
      }
    }
    return to_utf8(unicode.tempSubStringBetween(begin, end));
  }

 private:
  bool left_, right_;
};

// Every match of a literal string or a regex replaced by `content` (HF: Replace).
class Replace final : public Normalizer::Step {
 public:
  Replace(const nlohmann::json& pattern, std::string content, const std::string& source)
      : pattern_(pattern, "normalizer Replace", source), content_(std::move(content)) {}
  std::string apply(std::string text) const override { return pattern_.replace_all(text, content_); }

 private:
  RegexPattern pattern_;
  std::string content_;
};

// `prefix` before a text that is not empty (HF: Prepend; Llama 2's "▁").
class Prepend final : public Normalizer::Step {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string apply(std::string text) const override { return text.empty() ? text : prefix_ + text; }

 private:
  std::string prefix_;
};

void add_steps(const nlohmann::json& spec, const std::string& source, std::vector<std::unique_ptr<Normalizer::Step>>& steps) {
  if (spec.is_null()) return;
  const auto type = spec.value("type", std::string());
  if (type == "Sequence") {
    for (const auto& part : spec.at("normalizers")) add_steps(part, source, steps);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    steps.push_back(std::make_unique<UnicodeForm>(type));
  } else if (type == "Lowercase") {
    steps.push_back(std::make_unique<Lowercase>());
  } else if (type == "Strip") {
    steps.push_back(std::make_unique<Strip>(spec.value("strip_left", true), spec.value("strip_right", true)));
  } else if (type == "Replace") {
    steps.push_back(std::make_unique<Replace>(spec.at("pattern"), spec.at("content").get<std::string>(), source));
  } else if (type == "Prepend") {
    steps.push_back(std::make_unique<Prepend>(spec.at("prepend").get<std::string>()));
  } else {
    SO_FAIL(source << ": normalizer \"" << type
                   << "\" is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend and a "
                      "Sequence of them)"
                   << hint("a SentencePiece model's own normalization (Precompiled) is read from its tokenizer.model: "
                           "put tokenizer.model in the directory"));
  }
}

}  // namespace

Normalizer::Normalizer(const nlohmann::json& spec, const std::string& source) { add_steps(spec, source, steps_); }
Normalizer::~Normalizer() = default;
Normalizer::Normalizer(Normalizer&&) noexcept = default;

std::string Normalizer::apply(std::string_view text) const {
  std::string out(text);
  for (const auto& step : steps_) out = step->apply(std::move(out));
  return out;
}

bool Normalizer::is_normalized(std::string_view text) const { return steps_.empty() || apply(text) == text; }

}  // namespace superoffload::data
