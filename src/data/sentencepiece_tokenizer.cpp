// SentencePieceTokenizer.
#include "data/sentencepiece_tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <algorithm>

#include "base/error.hpp"

namespace superoffload::data {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : path_(model_path), processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const auto status = processor_->Load(model_path);
  SO_CHECK(status.ok(), "cannot load the SentencePiece model " << model_path << ": " << status.ToString()
                                                               << hint("the file must be a SentencePiece .model (protobuf)"));
  // The pieces HF's conversion of this model lists as special added tokens, which its
  // tokenizer matches in text whole: the control pieces (<s>, </s>, …) and the unknown piece
  // (<unk>). SentencePiece itself would cut "<unk>" written in a text into ordinary pieces.
  for (int id = 0; id < processor_->GetPieceSize(); ++id) {
    if ((processor_->IsControl(id) || processor_->IsUnknown(id)) && !processor_->IdToPiece(id).empty()) {
      control_.emplace_back(processor_->IdToPiece(id), id);
    }
  }
  std::stable_sort(control_.begin(), control_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int64_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }
int32_t SentencePieceTokenizer::model_bos() const { return processor_->bos_id(); }
int32_t SentencePieceTokenizer::model_eos() const { return processor_->eos_id(); }
int32_t SentencePieceTokenizer::model_pad() const { return processor_->pad_id(); }

std::optional<int32_t> SentencePieceTokenizer::token_id(std::string_view token) const {
  const int id = processor_->PieceToId(token);
  // PieceToId answers unk for unknown pieces; only the unk piece itself maps there.
  if (id == processor_->unk_id() && processor_->IdToPiece(id) != token) return std::nullopt;
  return id;
}

void SentencePieceTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  SO_CHECK(status.ok(), "SentencePiece (" << path_ << ") failed to encode text: " << status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int32_t> SentencePieceTokenizer::encode_text(std::string_view text) const {
  std::vector<int32_t> out;
  size_t plain_begin = 0, position = 0;
  while (position < text.size()) {
    const auto match = std::find_if(control_.begin(), control_.end(), [&](const auto& control) {
      return text.compare(position, control.first.size(), control.first) == 0;
    });
    if (match == control_.end()) {
      ++position;
      continue;
    }
    encode_plain(text.substr(plain_begin, position - plain_begin), out);
    out.push_back(match->second);
    position += match->first.size();
    plain_begin = position;
  }
  encode_plain(text.substr(plain_begin), out);
  return out;
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  const std::vector<int> as_int(ids.begin(), ids.end());
  const auto status = processor_->Decode(as_int, &text);
  SO_CHECK(status.ok(), "SentencePiece (" << path_ << ") failed to decode: " << status.ToString());
  return text;
}

}  // namespace superoffload::data
