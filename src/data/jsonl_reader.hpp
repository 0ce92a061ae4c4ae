// Reads one rank's share of a JSON Lines file: the lines that start in its byte range
// [rank, rank + 1) · size / world, so ranks split a large file without reading all of it and,
// taken in rank order, see every line once and in file order. Errors name file and line.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>

#include "jinja/value.hpp"

namespace superoffload::data {

class JsonlReader {
 public:
  JsonlReader(const std::string& path, int rank, int world);

  // Parses the next non-blank line of the share into `record` (which must be a JSON object);
  // false at the end of the share.
  bool next(nlohmann::ordered_json& record);  // keys in file order, as Python reads them
  // The same, read straight into a chat template's values (a dict).
  bool next(jinja::Value& record);
  // "file:line" of the line last read, for messages (counts lines on demand).
  std::string where() const;
  // Fraction of the share read so far.
  double progress() const;

 private:
  std::string path_;
  mutable std::ifstream in_;
  int64_t begin_ = 0, end_ = 0;
  int64_t line_start_ = 0;  // byte offset of the line last read
  int64_t next_start_ = 0;  // byte offset of the next line
  bool next_line();  // the next non-blank line of the share into line_
  [[noreturn]] void not_json(const std::exception& e) const;
  std::string line_;
};

}  // namespace superoffload::data
