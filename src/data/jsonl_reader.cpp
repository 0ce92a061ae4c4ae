// JsonlReader.
#include "data/jsonl_reader.hpp"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "base/error.hpp"

namespace superoffload::data {

JsonlReader::JsonlReader(const std::string& path, int rank, int world) : path_(path), in_(path, std::ios::binary) {
  SO_CHECK(in_, "cannot open the dataset " << path << hint("check [data] path"));
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path));
  begin_ = size * rank / world;
  end_ = size * (rank + 1) / world;
  // A line belongs to the share its first byte falls in: skip a line begun in the previous one.
  if (begin_ > 0) {
    in_.seekg(begin_ - 1);
    if (in_.get() != '\n') std::getline(in_, line_);
  }
  next_start_ = in_ ? static_cast<int64_t>(in_.tellg()) : size;
}

bool JsonlReader::next_line() {
  while (next_start_ < end_ && std::getline(in_, line_)) {
    line_start_ = next_start_;
    next_start_ = in_.eof() ? end_ : static_cast<int64_t>(in_.tellg());
    if (!std::all_of(line_.begin(), line_.end(), [](unsigned char c) { return std::isspace(c); })) return true;
  }
  return false;
}

void JsonlReader::not_json(const std::exception& e) const {
  SO_FAIL(where() << ": not valid JSON: " << e.what() << hint("each line of a JSONL file must be one JSON object"));
}

bool JsonlReader::next(nlohmann::ordered_json& record) {
  if (!next_line()) return false;
  try {
    record = nlohmann::ordered_json::parse(line_);
  } catch (const nlohmann::json::parse_error& e) {
    not_json(e);
  }
  SO_CHECK(record.is_object(), where() << ": each line must be a JSON object, this one is a " << record.type_name());
  return true;
}

bool JsonlReader::next(jinja::Value& record) {
  if (!next_line()) return false;
  try {
    record = jinja::Value::parse_json(line_);
  } catch (const nlohmann::json::exception& e) {
    not_json(e);
  } catch (const std::invalid_argument& e) {
    not_json(e);
  }
  SO_CHECK(record.is_dict(), where() << ": each line must be a JSON object, this one is " << record.repr().substr(0, 40));
  return true;
}

std::string JsonlReader::where() const {
  // Only on the error path: count the newlines before the line.
  std::ifstream counter(path_, std::ios::binary);
  int64_t line = 1, position = 0;
  char buffer[1 << 16];
  while (position < line_start_ && counter.read(buffer, std::min<int64_t>(sizeof buffer, line_start_ - position))) {
    line += std::count(buffer, buffer + counter.gcount(), '\n');
    position += counter.gcount();
  }
  return path_ + ":" + std::to_string(line);
}

double JsonlReader::progress() const {
  return end_ > begin_ ? static_cast<double>(std::min(next_start_, end_) - begin_) / static_cast<double>(end_ - begin_) : 1.0;
}

}  // namespace superoffload::data
