// Generates the embedded demo's training corpus: short English-like documents with
// learnable structure (word spelling, templates, small sums that must add up, counting),
// written as JSON Lines ({"text": ...}), about N tokens for the tiny model's byte-level
// tokenizer (configs/models/tiny-llama/tokenizer.json: bytes 0-255, BOS 256, EOS 257).
// With --chat, the same tasks as conversations ({"messages": [...]}, OpenAI/HF roles, a
// system turn in some, one to three exchanges): the user asks, the assistant answers, so
// an assistant-only loss has something to learn. N then counts the conversations' text.
// Deterministic for a seed; nothing is downloaded.
//
//   superoffload_demo_corpus OUT.jsonl [--tokens N] [--seed S] [--chat]
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

// One question and its answer, from the same tasks as the documents.
std::pair<std::string, std::string> exchange(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0: {
      const int x = static_cast<int>(rng() % 10), y = static_cast<int>(rng() % 10);
      return {"What is " + std::to_string(x) + " plus " + std::to_string(y) + "?",
              std::to_string(x) + " plus " + std::to_string(y) + " is " + std::to_string(x + y) + "."};
    }
    case 1: {
      const int start = static_cast<int>(rng() % 50), length = 3 + static_cast<int>(rng() % 6);
      std::string answer;
      for (int i = 0; i < length; ++i) answer += (i ? " " : "") + std::to_string(start + i);
      return {"Count from " + std::to_string(start) + " to " + std::to_string(start + length - 1) + ".", answer + "."};
    }
    case 2: {
      const std::string colour = pick(kColours, rng), animal = pick(kAnimals, rng), verb = pick(kVerbs, rng);
      return {"What does the " + colour + " " + animal + " do?", "The " + colour + " " + animal + " " + verb + " the " +
                                                                     pick(kColours, rng) + " " + pick(kAnimals, rng) + "."};
    }
    default: {
      const char letter = static_cast<char>('a' + rng() % 25);
      return {std::string("Which letter comes after ") + letter + "?", std::string("After ") + letter + " comes " +
                                                                         static_cast<char>(letter + 1) + "."};
    }
  }
}

nlohmann::ordered_json conversation(std::mt19937_64& rng, int64_t& characters) {
  auto messages = nlohmann::ordered_json::array();
  auto add = [&](const char* role, const std::string& content) {
    messages.push_back({{"role", role}, {"content", content}});
    characters += static_cast<int64_t>(content.size());
  };
  if (rng() % 4 == 0) add("system", "You answer in one short sentence.");
  for (int turns = 1 + static_cast<int>(rng() % 3); turns > 0; --turns) {
    const auto [question, answer] = exchange(rng);
    add("user", question);
    add("assistant", answer);
  }
  return {{"messages", messages}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: superoffload_demo_corpus OUT.jsonl [--tokens N] [--seed S] [--chat]\n");
    return 2;
  }
  const std::string out = argv[1];
  int64_t target = 1'000'000;
  uint64_t seed = 7;
  bool chat = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--chat") {
      chat = true;
    } else if ((a == "--tokens" || a == "--seed") && i + 1 < argc) {
      const std::string value = argv[++i];
      try {
        if (a == "--tokens") target = std::stoll(value);
        else seed = std::stoull(value);
      } catch (const std::exception&) {
        std::fprintf(stderr, "superoffload_demo_corpus: %s takes a whole number, not '%s'\n", a.c_str(), value.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "superoffload_demo_corpus: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  std::mt19937_64 rng(seed);
  int64_t tokens = 0, documents = 0;
  try {
    std::filesystem::create_directories(std::filesystem::absolute(out).parent_path());
    const std::string temporary = out + ".partial";
    {
      std::ofstream file(temporary);
      while (tokens < target) {
        if (chat) {
          file << conversation(rng, tokens).dump() << "\n";
        } else {
          const auto text = document(rng);
          file << nlohmann::json{{"text", text}}.dump() << "\n";
          tokens += static_cast<int64_t>(text.size()) + 2;  // bytes, BOS and EOS
        }
        ++documents;
      }
      if (!file.flush()) throw std::runtime_error("cannot write " + temporary);
    }
    std::filesystem::rename(temporary, out);  // never leave a half-written corpus under the real name
  } catch (const std::exception& e) {
    std::fprintf(stderr, "superoffload_demo_corpus: %s\n", e.what());
    return 1;
  }
  if (chat) {
    std::printf("wrote %s: %lld conversations, %lld characters of messages\n", out.c_str(),
                static_cast<long long>(documents), static_cast<long long>(tokens));
  } else {
    std::printf("wrote %s: %lld documents, %lld tokens with the byte-level tokenizer\n", out.c_str(),
                static_cast<long long>(documents), static_cast<long long>(tokens));
  }
  return 0;
}
