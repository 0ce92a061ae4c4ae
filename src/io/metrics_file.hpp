// <output_dir>/metrics.h5, written by rank 0 while training runs: one extendible dataset per
// quantity under /train (a row per step), per-rank timings under /ranks ([steps, world], for
// stragglers), the configuration and environment as attributes. The file is in SWMR mode,
// so h5py can read it during the run (h5py.File(path, "r", swmr=True), dataset.refresh()).
// A resumed run drops the rows past its checkpoint and appends; resumed at another world size
// it keeps /train, and the earlier steps' /ranks rows read NaN (one column per rank of the new
// world). A file of another layout is kept as metrics.h5.<time>.old. Datasets of a fixed shape
// (the one-step profile) are created up front, NaN until written: SWMR allows no new objects
// once readers may follow the file. /eval holds a row per evaluation (its own "step" column
// first), dropped past the checkpoint on resume like /train's; a file written before /eval
// existed gains an empty one.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"

namespace superoffload::io {

// A dataset of fixed shape, created with the file and written once (write_fixed); or, with
// `text`, a 1-D extendible uint8 dataset written once with UTF-8 text (write_text; `dims`
// unused): SWMR may extend a dataset but not create one, and has no variable-length strings.
struct FixedDataset {
  std::string name;                             // e.g. "profile/seconds"
  std::vector<hsize_t> dims;
  std::map<std::string, std::string> attributes;  // string attributes of the dataset
  bool text = false;
};

class MetricsFile {
 public:
  // `train_columns` name the /train datasets (the first must be "step"); `rank_columns` the
  // /ranks ones. Rows whose step is greater than `keep_through_step` are dropped from an
  // existing file with the same columns; a file with other columns is renamed aside.
  MetricsFile(const std::string& path, std::vector<std::string> train_columns, std::vector<std::string> rank_columns,
              int world_size, int64_t keep_through_step, const std::map<std::string, std::string>& attributes,
              std::vector<FixedDataset> fixed = {}, std::vector<std::string> eval_columns = {});
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  // One step: a value per train column, and world_size values per rank column (rank order,
  // column by column).
  void append(const std::vector<double>& train_row, const std::vector<double>& rank_values);
  // One evaluation: a value per eval column.
  void append_eval(const std::vector<double>& eval_row);
  // Writes a whole fixed dataset (values in row-major order of its dims).
  void write_fixed(const std::string& name, const std::vector<double>& values);
  // Writes a text dataset (h5py: bytes(f[name][:]).decode()).
  void write_text(const std::string& name, const std::string& text);
  // Makes the appended rows visible to SWMR readers.
  void flush();
  int64_t rows() const { return rows_; }

 private:
  void create(const std::map<std::string, std::string>& attributes);
  bool reopen(int64_t keep_through_step, const std::map<std::string, std::string>& attributes);
  void open_datasets();
  std::string path_;
  std::vector<std::string> train_columns_, rank_columns_, eval_columns_;
  std::vector<FixedDataset> fixed_;
  int world_;
  int64_t rows_ = 0, eval_rows_ = 0;
  Hdf5Handle file_;
  std::vector<Hdf5Handle> train_sets_, rank_sets_, eval_sets_;
};

}  // namespace superoffload::io
