// "Did you mean …?" for misspelt keys and values.
#pragma once

#include <string>
#include <vector>

namespace superoffload::config {

// Edit distance with adjacent transpositions (optimal string alignment).
size_t edit_distance(const std::string& a, const std::string& b);

// The closest candidate within a distance that scales with the word's length, or "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace superoffload::config
