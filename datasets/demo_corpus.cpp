// Generates the embedded demo's training corpus: short English-like documents with
// learnable structure (word spelling, templates, small sums that must add up, counting),
// written as JSON Lines ({"text": ...}), about N tokens for the tiny model's byte-level
// tokenizer (configs/models/tiny-llama/tokenizer.json: bytes 0-255, BOS 256, EOS 257).
// Deterministic for a seed; nothing is downloaded.
//
//   superoffload_demo_corpus OUT.jsonl [--tokens N] [--seed S]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

const char* const kNames[] = {"Tom", "Ann", "Lena", "Omar", "Mia", "Ravi", "Yuki", "Sam"};
const char* const kThings[] = {"apples", "books", "coins", "stones", "shells", "cards"};
const char* const kAnimals[] = {"fox", "dog", "cat", "owl", "bear", "horse"};
const char* const kColours[] = {"red", "brown", "black", "white", "grey", "golden"};
const char* const kVerbs[] = {"jumps over", "runs past", "looks at", "sleeps near", "follows"};

template <size_t N>
const char* pick(const char* const (&words)[N], std::mt19937_64& rng) {
  return words[rng() % N];
}

std::string document(std::mt19937_64& rng) {
  std::string text;
  switch (rng() % 4) {
    case 0: {  // a small sum that must add up
      const std::string a = pick(kNames, rng), b = pick(kNames, rng), thing = pick(kThings, rng);
      const int x = static_cast<int>(rng() % 10), y = static_cast<int>(rng() % 10);
      text = a + " has " + std::to_string(x) + " " + thing + ". " + b + " gives " + a + " " + std::to_string(y) +
             " " + thing + ". Now " + a + " has " + std::to_string(x + y) + " " + thing + ".";
      break;
    }
    case 1: {  // counting
      int start = static_cast<int>(rng() % 50), length = 4 + static_cast<int>(rng() % 8);
      text = "Counting:";
      for (int i = 0; i < length; ++i) text += " " + std::to_string(start + i);
      text += ".";
      break;
    }
    case 2: {  // a sentence from a template
      text = std::string("The ") + pick(kColours, rng) + " " + pick(kAnimals, rng) + " " + pick(kVerbs, rng) +
             " the " + pick(kColours, rng) + " " + pick(kAnimals, rng) + ".";
      break;
    }
    default: {  // the alphabet from a random letter
      const int start = static_cast<int>(rng() % 20);
      text = "Letters:";
      for (int i = start; i < std::min(26, start + 8); ++i) text += std::string(" ") + static_cast<char>('a' + i);
      text += ".";
    }
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: superoffload_demo_corpus OUT.jsonl [--tokens N] [--seed S]\n");
    return 2;
  }
  const std::string out = argv[1];
  int64_t target = 1'000'000;
  uint64_t seed = 7;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokens") target = std::stoll(argv[i + 1]);
    else if (a == "--seed") seed = std::stoull(argv[i + 1]);
  }
  std::mt19937_64 rng(seed);
  int64_t tokens = 0, documents = 0;
  try {
    std::filesystem::create_directories(std::filesystem::absolute(out).parent_path());
    const std::string temporary = out + ".partial";
    {
      std::ofstream file(temporary);
      while (tokens < target) {
        const auto text = document(rng);
        file << nlohmann::json{{"text", text}}.dump() << "\n";
        tokens += static_cast<int64_t>(text.size()) + 2;  // bytes, BOS and EOS
        ++documents;
      }
      if (!file.flush()) throw std::runtime_error("cannot write " + temporary);
    }
    std::filesystem::rename(temporary, out);  // never leave a half-written corpus under the real name
  } catch (const std::exception& e) {
    std::fprintf(stderr, "superoffload_demo_corpus: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %s: %lld documents, %lld tokens with the byte-level tokenizer\n", out.c_str(),
              static_cast<long long>(documents), static_cast<long long>(tokens));
  return 0;
}
