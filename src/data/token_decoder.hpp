// The decoder of a HuggingFace tokenizer.json: how token strings become text again (HF
// `tokenizers`' decode_chain): ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and a
// Sequence of them. Used by eval and the logs.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <vector>

namespace superoffload::data {

class TokenDecoder {
 public:
  // `spec` is tokenizer.json's "decoder". Null decodes as HF does without one: the tokens
  // joined by spaces — except after a ByteLevel pre-tokenizer (`byte_level`), whose files
  // always meant the byte alphabet to be undone.
  TokenDecoder(const nlohmann::json& spec, bool byte_level, const std::string& source);
  ~TokenDecoder();
  TokenDecoder(TokenDecoder&&) noexcept;
  std::string decode(std::vector<std::string> tokens) const;

  class Step {
   public:
    virtual ~Step() = default;
    virtual std::vector<std::string> apply(std::vector<std::string> tokens) const = 0;
  };

 private:
  std::vector<std::unique_ptr<Step>> steps_;
  bool join_with_spaces_ = false;
};

}  // namespace superoffload::data
