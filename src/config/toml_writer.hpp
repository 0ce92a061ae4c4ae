// Writes a configuration as TOML: the effective configuration (values, with where each
// non-default came from) or the reference (every key, its default and its explanation).
#pragma once

#include <map>
#include <string>

#include "config/config.hpp"
#include "config/schema.hpp"

namespace superoffload::config {

// The effective configuration. With `origins`, keys not at their default carry a comment
// naming their origin.
std::string to_toml(const Config& config, const std::map<std::string, std::string>* origins = nullptr);

// One value as TOML writes it ("1e-05", "\"cosine\"", "[0.9, 0.999]").
std::string value_text(const Value& value);

// configs/reference.toml: every section and key with its default and a one-line explanation.
std::string reference_toml();

}  // namespace superoffload::config
