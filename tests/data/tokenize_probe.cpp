// Test helper: tokenizes texts with load_tokenizer() and writes what came out, for
// tokenizer_parity.py to compare with HF tokenizers and sentencepiece.
//
//   tokenize_probe TOKENIZER_PATH TEXTS.json OUT.json
// TEXTS.json: a list of strings. OUT.json: {"kind", "vocab_size", "bos", "eos", "pad",
// "ids": [[...]] (no special tokens), "ids_special": [[...]], "decoded": [...]}.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "data/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: tokenize_probe TOKENIZER_PATH TEXTS.json OUT.json\n";
    return 2;
  }
  try {
    const auto tokenizer = superoffload::data::load_tokenizer(argv[1]);
    std::ifstream in(argv[2]);
    const auto texts = nlohmann::json::parse(in);
    nlohmann::json out;
    out["kind"] = tokenizer->kind();
    out["vocab_size"] = tokenizer->vocab_size();
    const auto& special = tokenizer->special();
    out["bos"] = special.bos ? nlohmann::json(*special.bos) : nlohmann::json();
    out["eos"] = special.eos ? nlohmann::json(*special.eos) : nlohmann::json();
    out["pad"] = special.pad ? nlohmann::json(*special.pad) : nlohmann::json();
    for (const auto& text : texts) {
      const auto ids = tokenizer->encode_text(text.get<std::string>());
      out["ids"].push_back(ids);
      out["ids_special"].push_back(tokenizer->encode(text.get<std::string>()));
      out["decoded"].push_back(tokenizer->decode(ids));
    }
    std::ofstream(argv[3]) << out.dump();
  } catch (const std::exception& e) {
    std::cerr << "tokenize_probe: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
