// Every configuration key: section, name, type, default (the struct's initialiser),
// constraints and a one-line explanation. The loader, the TOML writer, `config --reference`
// and configs/reference.toml all derive from this one table.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "config/config.hpp"

namespace superoffload::config {

enum class Kind { boolean, integer, number, string, number_list };
const char* describe(Kind kind);

using Value = std::variant<bool, std::int64_t, double, std::string, std::vector<double>>;

struct Field {
  std::string section;
  std::string key;
  std::string doc;
  Kind kind = Kind::string;
  std::function<Value(const Config&)> get;
  std::function<void(Config&, const Value&)> set;

  bool required = false;
  std::string example;  // TOML text shown in reference.toml for a required key
  std::optional<double> min, max;
  bool min_exclusive = false;
  bool max_exclusive = false;
  std::vector<std::string> choices;  // allowed strings (or integers, as text)
  size_t list_size = 0;              // exact length of a number list, 0 = any
  bool integer_as_text = false;      // a string field that also takes a TOML integer (a step: 3)

  std::string name() const { return "[" + section + "] " + key; }
  std::string dotted() const { return section + "." + key; }

  // Chained set-up used by schema.cpp.
  Field& range(double lo, double hi) { min = lo; max = hi; return *this; }
  Field& at_least(double lo) { min = lo; return *this; }
  Field& above(double lo) { min = lo; min_exclusive = true; return *this; }
  Field& below(double hi) { max = hi; max_exclusive = true; return *this; }
  Field& one_of(std::vector<std::string> values) { choices = std::move(values); return *this; }
  Field& size(size_t n) { list_size = n; return *this; }
  Field& integers_too() { integer_as_text = true; return *this; }
  Field& require(std::string example_toml) { required = true; example = std::move(example_toml); return *this; }
};

struct Section {
  std::string name;
  std::string doc;
  std::vector<Field> fields;
};

const std::vector<Section>& schema();
const Section* find_section(const std::string& name);
const Field* find_field(const std::string& section, const std::string& key);

// Checks a converted value against the field's constraints; returns the problem or "".
std::string check_constraints(const Field& field, const Value& value);

}  // namespace superoffload::config
