// CsvMonitor.
#include "io/csv_monitor.hpp"

#include <cerrno>
#include <charconv>
#include <cstring>

#include "base/error.hpp"

namespace superoffload::io {

namespace fs = std::filesystem;

CsvMonitor::CsvMonitor(fs::path directory) : directory_(std::move(directory)) {
  std::error_code ec;
  fs::create_directories(directory_, ec);
  SO_CHECK(!ec, "cannot create the CSV monitor directory " << directory_.string() << ": " << ec.message());
}

CsvMonitor::~CsvMonitor() {
  for (auto& [tag, file] : files_) std::fclose(file);
}

void CsvMonitor::write(const std::string& tag, double value, int64_t step) {
  auto it = files_.find(tag);
  if (it == files_.end()) {
    std::string name = tag;
    for (char& c : name) c = c == '/' || c == ' ' ? '_' : c;
    const fs::path path = directory_ / (name + ".csv");
    std::error_code ec;
    const bool fresh = !fs::exists(path, ec) || fs::file_size(path, ec) == 0;
    std::FILE* file = std::fopen(path.c_str(), "a");
    SO_CHECK(file, "cannot open " << path.string() << ": " << std::strerror(errno));
    if (fresh) std::fprintf(file, "step,%s\n", tag.substr(tag.rfind('/') + 1).c_str());
    it = files_.emplace(tag, file).first;
  }
  char text[64];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;  // shortest text that reads back exactly
  SO_CHECK(std::fprintf(it->second, "%lld,%.*s\n", static_cast<long long>(step), static_cast<int>(end - text), text) > 0,
           "writing " << (directory_ / tag).string() << ".csv failed: " << std::strerror(errno));
}

void CsvMonitor::flush() {
  for (auto& [tag, file] : files_) {
    SO_CHECK(std::fflush(file) == 0, "writing the CSV of " << tag << " failed: " << std::strerror(errno));
  }
}

}  // namespace superoffload::io
