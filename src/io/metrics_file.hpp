// <output_dir>/metrics.h5, written by rank 0 while training runs: one extendible dataset per
// quantity under /train (a row per step), per-rank timings under /ranks ([steps, world], for
// stragglers), the configuration and environment as attributes. The file is in SWMR mode,
// so h5py can read it during the run (h5py.File(path, "r", swmr=True), dataset.refresh()).
// A resumed run drops the rows past its checkpoint and appends.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"

namespace superoffload::io {

class MetricsFile {
 public:
  // `train_columns` name the /train datasets (the first must be "step"); `rank_columns` the
  // /ranks ones. Rows whose step is greater than `keep_through_step` are dropped from an
  // existing file with the same columns; a file with other columns is renamed aside.
  MetricsFile(const std::string& path, std::vector<std::string> train_columns, std::vector<std::string> rank_columns,
              int world_size, int64_t keep_through_step, const std::map<std::string, std::string>& attributes);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  // One step: a value per train column, and world_size values per rank column (rank order,
  // column by column).
  void append(const std::vector<double>& train_row, const std::vector<double>& rank_values);
  // Makes the appended rows visible to SWMR readers.
  void flush();
  int64_t rows() const { return rows_; }

 private:
  void create(const std::map<std::string, std::string>& attributes);
  bool reopen(int64_t keep_through_step, const std::map<std::string, std::string>& attributes);
  void open_datasets();
  std::string path_;
  std::vector<std::string> train_columns_, rank_columns_;
  int world_;
  int64_t rows_ = 0;
  Hdf5Handle file_;
  std::vector<Hdf5Handle> train_sets_, rank_sets_;
};

}  // namespace superoffload::io
