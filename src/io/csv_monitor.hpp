// DeepSpeed's csv_monitor layout: one CSV per series in the job's directory, named after its
// tag with '/' and ' ' as '_' ("Train/Samples/train_loss" → Train_Samples_train_loss.csv),
// a header "step,<last part of the tag>" when the file is new, then "step,value" rows,
// appended (a resumed run continues the same files, as DeepSpeed's does).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

namespace superoffload::io {

class CsvMonitor {
 public:
  explicit CsvMonitor(std::filesystem::path directory);
  ~CsvMonitor();
  CsvMonitor(const CsvMonitor&) = delete;
  CsvMonitor& operator=(const CsvMonitor&) = delete;

  void write(const std::string& tag, double value, int64_t step);
  void flush();

 private:
  std::filesystem::path directory_;
  std::map<std::string, std::FILE*> files_;  // by tag
};

}  // namespace superoffload::io
