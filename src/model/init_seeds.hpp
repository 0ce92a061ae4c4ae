// The seeds and blocks of random initialisation, shared by the two ways of drawing it: whole
// layers (CausalLM::init_layer_parameters) and ranges of their parameters (a ZeRO rank's
// shards: model_io/random_ranges). A weight is drawn in fp32 in blocks of kInitBlock elements,
// block b from its own generator: its values depend on the weight's name, the seed and b alone,
// never on the thread count, the partitioning or the world size.
// Internal to the project (not installed): the plugin ABI does not include it.
#pragma once

#include <cstdint>
#include <string>

namespace superoffload::model::init_seeds {

// 4 Mi elements: the tensors of the tiny models the tests and the demo use are one block each.
inline constexpr int64_t kInitBlock = int64_t{1} << 22;

inline uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// A 64-bit mix (SplitMix64's finaliser): seeds of a weight's later blocks, far apart.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The seed of a weight's block 0 (what a weight of one block was always drawn from).
inline uint64_t weight_seed(uint64_t seed, const std::string& hf_name) { return seed ^ fnv1a(hf_name); }

inline uint64_t block_seed(uint64_t weight, int64_t block) {
  return block == 0 ? weight : splitmix64(weight + static_cast<uint64_t>(block));
}

}  // namespace superoffload::model::init_seeds
