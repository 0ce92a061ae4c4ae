// MetricsFile.
#include "io/metrics_file.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>

#include "base/error.hpp"
#include "io/check_hdf5.hpp"

namespace superoffload::io {

namespace fs = std::filesystem;

namespace {

constexpr hsize_t kChunkRows = 256;

Hdf5Handle file_access() {
  Hdf5Handle access(SO_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS), "file access properties"), H5Pclose);
  // SWMR needs the latest file format.
  SO_CHECK_HDF5(H5Pset_libver_bounds(access.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), "file format bounds");
  return access;
}

// An extendible float64 dataset of `columns` values per row (1-D when columns is 0).
void create_series(hid_t file, const std::string& name, hsize_t columns) {
  const int rank = columns == 0 ? 1 : 2;
  const hsize_t dims[2] = {0, columns}, max_dims[2] = {H5S_UNLIMITED, columns}, chunk[2] = {kChunkRows, columns};
  const Hdf5Handle space(SO_CHECK_HDF5(H5Screate_simple(rank, dims, max_dims), "dataspace of " << name), H5Sclose);
  const Hdf5Handle properties(SO_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE), "properties"), H5Pclose);
  SO_CHECK_HDF5(H5Pset_chunk(properties.get(), rank, chunk), "chunking " << name);
  const Hdf5Handle links(SO_CHECK_HDF5(H5Pcreate(H5P_LINK_CREATE), "link properties"), H5Pclose);
  SO_CHECK_HDF5(H5Pset_create_intermediate_group(links.get(), 1), "groups of " << name);
  const Hdf5Handle set(SO_CHECK_HDF5(H5Dcreate2(file, name.c_str(), H5T_NATIVE_DOUBLE, space.get(), links.get(),
                                                properties.get(), H5P_DEFAULT),
                                     "creating " << name),
                       H5Dclose);
}

// An extendible uint8 dataset, empty until written.
void create_text(hid_t file, const FixedDataset& d) {
  const hsize_t dims[1] = {0}, max_dims[1] = {H5S_UNLIMITED}, chunk[1] = {16384};
  const Hdf5Handle space(SO_CHECK_HDF5(H5Screate_simple(1, dims, max_dims), "dataspace of " << d.name), H5Sclose);
  const Hdf5Handle properties(SO_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE), "properties"), H5Pclose);
  SO_CHECK_HDF5(H5Pset_chunk(properties.get(), 1, chunk), "chunking " << d.name);
  const Hdf5Handle links(SO_CHECK_HDF5(H5Pcreate(H5P_LINK_CREATE), "link properties"), H5Pclose);
  SO_CHECK_HDF5(H5Pset_create_intermediate_group(links.get(), 1), "groups of " << d.name);
  const Hdf5Handle set(SO_CHECK_HDF5(H5Dcreate2(file, d.name.c_str(), H5T_NATIVE_UINT8, space.get(), links.get(),
                                                properties.get(), H5P_DEFAULT),
                                     "creating " << d.name),
                       H5Dclose);
  for (const auto& [name, value] : d.attributes) write_string_attribute(set.get(), name, value);
}

// A float64 dataset of fixed shape, NaN until written.
void create_fixed(hid_t file, const FixedDataset& d) {
  if (d.text) {
    create_text(file, d);
    return;
  }
  const Hdf5Handle space(SO_CHECK_HDF5(H5Screate_simple(static_cast<int>(d.dims.size()), d.dims.data(), nullptr),
                                      "dataspace of " << d.name),
                         H5Sclose);
  const Hdf5Handle properties(SO_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE), "properties"), H5Pclose);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  SO_CHECK_HDF5(H5Pset_fill_value(properties.get(), H5T_NATIVE_DOUBLE, &nan), "fill value of " << d.name);
  SO_CHECK_HDF5(H5Pset_alloc_time(properties.get(), H5D_ALLOC_TIME_EARLY), "allocation of " << d.name);
  const Hdf5Handle links(SO_CHECK_HDF5(H5Pcreate(H5P_LINK_CREATE), "link properties"), H5Pclose);
  SO_CHECK_HDF5(H5Pset_create_intermediate_group(links.get(), 1), "groups of " << d.name);
  const Hdf5Handle set(SO_CHECK_HDF5(H5Dcreate2(file, d.name.c_str(), H5T_NATIVE_DOUBLE, space.get(), links.get(),
                                                properties.get(), H5P_DEFAULT),
                                     "creating " << d.name),
                       H5Dclose);
  for (const auto& [name, value] : d.attributes) write_string_attribute(set.get(), name, value);
}

void append_row(hid_t set, hsize_t row, const double* values, hsize_t columns) {
  const int rank = columns == 0 ? 1 : 2;
  const hsize_t extent[2] = {row + 1, columns}, start[2] = {row, 0}, count[2] = {1, std::max<hsize_t>(columns, 1)};
  SO_CHECK_HDF5(H5Dset_extent(set, extent), "extending a metrics dataset");
  const Hdf5Handle space(SO_CHECK_HDF5(H5Dget_space(set), "dataspace"), H5Sclose);
  SO_CHECK_HDF5(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), "row selection");
  const Hdf5Handle memory(SO_CHECK_HDF5(H5Screate_simple(rank, count, nullptr), "row space"), H5Sclose);
  SO_CHECK_HDF5(H5Dwrite(set, H5T_NATIVE_DOUBLE, memory.get(), space.get(), H5P_DEFAULT, values), "writing a metrics row");
}

}  // namespace

MetricsFile::MetricsFile(const std::string& path, std::vector<std::string> train_columns,
                         std::vector<std::string> rank_columns, int world_size, int64_t keep_through_step,
                         const std::map<std::string, std::string>& attributes, std::vector<FixedDataset> fixed,
                         std::vector<std::string> eval_columns)
    : path_(path),
      train_columns_(std::move(train_columns)),
      rank_columns_(std::move(rank_columns)),
      eval_columns_(std::move(eval_columns)),
      fixed_(std::move(fixed)),
      world_(world_size) {
  SO_CHECK(!train_columns_.empty() && train_columns_[0] == "step", "metrics: the first column must be \"step\"");
  SO_CHECK(eval_columns_.empty() || eval_columns_[0] == "step", "metrics: the first eval column must be \"step\"");
  if (!fs::exists(path_) || !reopen(keep_through_step, attributes)) create(attributes);
  // From here on only rows are added: readers may follow the file.
  SO_CHECK_HDF5(H5Fstart_swmr_write(file_.get()), "switching " << path_ << " to SWMR writing");
  open_datasets();
}

MetricsFile::~MetricsFile() {
  train_sets_.clear();
  rank_sets_.clear();
  eval_sets_.clear();
  if (file_.get() >= 0) H5Fflush(file_.get(), H5F_SCOPE_GLOBAL);
}

void MetricsFile::create(const std::map<std::string, std::string>& attributes) {
  const auto parent = fs::path(path_).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  const auto access = file_access();
  file_ = Hdf5Handle(SO_CHECK_HDF5(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()), "creating " << path_),
                     H5Fclose);
  for (const auto& column : train_columns_) create_series(file_.get(), "train/" + column, 0);
  for (const auto& column : rank_columns_) create_series(file_.get(), "ranks/" + column, static_cast<hsize_t>(world_));
  for (const auto& column : eval_columns_) create_series(file_.get(), "eval/" + column, 0);
  for (const auto& [name, value] : attributes) write_string_attribute(file_.get(), name, value);
  for (const auto& d : fixed_) create_fixed(file_.get(), d);
  rows_ = 0;
  eval_rows_ = 0;
}

void MetricsFile::write_fixed(const std::string& name, const std::vector<double>& values) {
  const auto d = std::find_if(fixed_.begin(), fixed_.end(), [&](const FixedDataset& f) { return f.name == name; });
  SO_CHECK(d != fixed_.end(), "metrics: no fixed dataset " << name);
  hsize_t count = 1;
  for (hsize_t n : d->dims) count *= n;
  SO_CHECK(values.size() == count, "metrics: " << name << " takes " << count << " values, not " << values.size());
  const Hdf5Handle set(SO_CHECK_HDF5(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT), name), H5Dclose);
  SO_CHECK_HDF5(H5Dwrite(set.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), "writing " << name);
}

void MetricsFile::write_text(const std::string& name, const std::string& text) {
  const auto d = std::find_if(fixed_.begin(), fixed_.end(), [&](const FixedDataset& f) { return f.name == name && f.text; });
  SO_CHECK(d != fixed_.end(), "metrics: no text dataset " << name);
  const Hdf5Handle set(SO_CHECK_HDF5(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT), name), H5Dclose);
  const hsize_t extent[1] = {text.size()};
  SO_CHECK_HDF5(H5Dset_extent(set.get(), extent), "extending " << name);
  if (text.empty()) return;
  SO_CHECK_HDF5(H5Dwrite(set.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()), "writing " << name);
}

namespace {

// Every column of an existing metrics file (rows as stored), or false when it cannot be read
// or lacks a column. A run killed while writing leaves the file marked as open for SWMR
// writing, which HDF5 refuses to reopen for writing; reading it in SWMR mode still works.
bool read_columns(const std::string& path, const std::vector<std::string>& names, std::vector<std::vector<double>>& out) {
  const auto access = file_access();
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, access.get());
  if (id < 0) id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) {
    detail::describe_hdf5_error_stack();  // clears it; the caller sets the file aside
    return false;
  }
  const Hdf5Handle file(id, H5Fclose);
  for (const auto& name : names) {
    if (H5Lexists(file.get(), name.c_str(), H5P_DEFAULT) <= 0) return false;
    const Hdf5Handle set(SO_CHECK_HDF5(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), name), H5Dclose);
    const Hdf5Handle space(SO_CHECK_HDF5(H5Dget_space(set.get()), name), H5Sclose);
    hsize_t dims[2] = {0, 1};
    SO_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), dims, nullptr), name);
    std::vector<double> values(static_cast<size_t>(dims[0] * std::max<hsize_t>(dims[1], 1)));
    if (!values.empty()) {
      SO_CHECK_HDF5(H5Dread(set.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), name);
    }
    out.push_back(std::move(values));
  }
  return true;
}

}  // namespace

bool MetricsFile::reopen(int64_t keep_through_step, const std::map<std::string, std::string>& attributes) {
  std::vector<std::string> names;
  for (const auto& column : train_columns_) names.push_back("train/" + column);
  for (const auto& column : rank_columns_) names.push_back("ranks/" + column);
  std::vector<std::vector<double>> columns;
  // The world size that wrote the file: /ranks holds `rows × world` values per column.
  const bool readable = read_columns(path_, names, columns);
  const size_t rows = readable ? columns[0].size() : 0;
  const size_t written_world = rows > 0 ? columns[train_columns_.size()].size() / rows : static_cast<size_t>(world_);
  bool same_layout = readable;
  for (size_t c = train_columns_.size(); same_layout && c < columns.size(); ++c) {
    same_layout = columns[c].size() == rows * written_world;
  }
  if (!same_layout) {
    // Another layout or unreadable: kept under another name.
    const auto stamp = std::chrono::system_clock::now().time_since_epoch() / std::chrono::seconds(1);
    fs::rename(path_, path_ + "." + std::to_string(stamp) + ".old");
    return false;
  }
  // The rows up to the resumed step (a run cut off after its checkpoint wrote more) go into a
  // fresh file, which then replaces the old one.
  size_t keep = 0;
  while (keep < columns[0].size() && columns[0][keep] <= static_cast<double>(keep_through_step)) ++keep;
  const std::string final_path = path_;
  // /eval, when the file has it (written before it existed: none), up to the resumed step.
  std::vector<std::vector<double>> evals;
  std::vector<std::string> eval_names;
  for (const auto& column : eval_columns_) eval_names.push_back("eval/" + column);
  if (eval_names.empty() || !read_columns(final_path, eval_names, evals)) evals.clear();
  path_ += ".tmp";
  create(attributes);
  open_datasets();
  const size_t train = train_columns_.size(), world = static_cast<size_t>(world_);
  for (size_t row = 0; row < keep; ++row) {
    std::vector<double> train_row, rank_values;
    for (size_t c = 0; c < train; ++c) train_row.push_back(columns[c][row]);
    for (size_t c = train; c < columns.size(); ++c) {
      if (written_world != world) {
        // Resumed at another world size (resharded): the curve goes on, the per-rank rows of
        // the earlier steps have no column per rank of this world and read NaN.
        rank_values.insert(rank_values.end(), world, std::numeric_limits<double>::quiet_NaN());
        continue;
      }
      rank_values.insert(rank_values.end(), columns[c].begin() + static_cast<std::ptrdiff_t>(row * world),
                         columns[c].begin() + static_cast<std::ptrdiff_t>((row + 1) * world));
    }
    append(train_row, rank_values);
  }
  for (size_t row = 0; !evals.empty() && row < evals[0].size(); ++row) {
    if (evals[0][row] > static_cast<double>(keep_through_step)) break;
    std::vector<double> eval_row;
    for (const auto& column : evals) eval_row.push_back(column[row]);
    append_eval(eval_row);
  }
  train_sets_.clear();
  rank_sets_.clear();
  eval_sets_.clear();
  flush();
  fs::rename(path_, final_path);
  path_ = final_path;
  return true;
}

void MetricsFile::open_datasets() {
  for (const auto& column : train_columns_) {
    train_sets_.emplace_back(SO_CHECK_HDF5(H5Dopen2(file_.get(), ("train/" + column).c_str(), H5P_DEFAULT), column), H5Dclose);
  }
  for (const auto& column : rank_columns_) {
    rank_sets_.emplace_back(SO_CHECK_HDF5(H5Dopen2(file_.get(), ("ranks/" + column).c_str(), H5P_DEFAULT), column), H5Dclose);
  }
  for (const auto& column : eval_columns_) {
    eval_sets_.emplace_back(SO_CHECK_HDF5(H5Dopen2(file_.get(), ("eval/" + column).c_str(), H5P_DEFAULT), column), H5Dclose);
  }
}

void MetricsFile::append_eval(const std::vector<double>& eval_row) {
  SO_CHECK(eval_row.size() == eval_columns_.size(), "metrics: an eval row has the wrong number of values");
  for (size_t c = 0; c < eval_sets_.size(); ++c) {
    append_row(eval_sets_[c].get(), static_cast<hsize_t>(eval_rows_), &eval_row[c], 0);
  }
  ++eval_rows_;
}

void MetricsFile::append(const std::vector<double>& train_row, const std::vector<double>& rank_values) {
  SO_CHECK(train_row.size() == train_columns_.size() &&
               rank_values.size() == rank_columns_.size() * static_cast<size_t>(world_),
           "metrics: a row has the wrong number of values");
  const auto row = static_cast<hsize_t>(rows_);
  for (size_t c = 0; c < train_sets_.size(); ++c) append_row(train_sets_[c].get(), row, &train_row[c], 0);
  for (size_t c = 0; c < rank_sets_.size(); ++c) {
    append_row(rank_sets_[c].get(), row, &rank_values[c * static_cast<size_t>(world_)], static_cast<hsize_t>(world_));
  }
  ++rows_;
}

void MetricsFile::flush() { SO_CHECK_HDF5(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), "flushing " << path_); }

}  // namespace superoffload::io
