// A thin RAII layer over the HDF5 C API: files, and whole datasets read or written in one
// call. Every call is checked (SO_CHECK_HDF5) and errors name the file and dataset.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace superoffload::io {

// Owns one hid_t and closes it with the matching H5*close.
class Hdf5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Hdf5Handle() = default;
  Hdf5Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Hdf5Handle() { reset(); }
  Hdf5Handle(Hdf5Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = H5I_INVALID_HID; }
  Hdf5Handle& operator=(Hdf5Handle&& other) noexcept {
    std::swap(id_, other.id_);
    std::swap(closer_, other.closer_);
    return *this;
  }
  Hdf5Handle(const Hdf5Handle&) = delete;
  Hdf5Handle& operator=(const Hdf5Handle&) = delete;
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t get() const { return id_; }
  // Gives up ownership (the caller closes it and checks the result).
  hid_t release() {
    const hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// How a dataset's elements are stored: integer or not, signedness and width.
struct StoredType {
  bool integer = false;
  bool is_signed = false;
  size_t bytes = 0;
  std::string describe() const;  // "int64", "uint32", "float32", "other (class 6)"…
};

template <class T>
struct Array {
  std::vector<hsize_t> shape;
  std::vector<T> values;  // row-major
};

// Writes (or replaces) a UTF-8 string attribute of an HDF5 object (file, group, dataset).
void write_string_attribute(hid_t object, const std::string& name, const std::string& value);

class Hdf5File {
 public:
  static Hdf5File open_read(const std::string& path);
  // Read-only while another process may be appending in SWMR mode (metrics.h5).
  static Hdf5File open_read_swmr(const std::string& path);
  struct CreateOptions {
    // The newest file format this HDF5 writes (1.10: every metadata block checksummed)
    // instead of the 1.8-compatible default.
    bool latest_format = false;
    // Metadata is gathered in blocks of this size (HDF5's default: 2 KiB), so that a file of
    // large datasets keeps its metadata together at its start instead of between the data.
    size_t metadata_block_bytes = 0;
  };
  // Creates (or truncates) `path`.
  static Hdf5File create(const std::string& path, const CreateOptions& options);
  static Hdf5File create(const std::string& path) { return create(path, CreateOptions{}); }
  // Flushes and closes now, checking both: HDF5 writes cached data and metadata at close, and
  // a destructor cannot report that this failed (a full disk). Nothing may be used after it.
  void close();

  const std::string& path() const { return path_; }
  bool has(const std::string& dataset) const;
  std::vector<hsize_t> shape(const std::string& dataset) const;
  StoredType stored_type(const std::string& dataset) const;
  // Values are converted by HDF5 from the stored integer / float type.
  Array<int64_t> read_int64(const std::string& dataset) const;
  Array<float> read_float(const std::string& dataset) const;
  Array<double> read_double(const std::string& dataset) const;
  Array<uint32_t> read_uint32(const std::string& dataset) const;
  Array<uint8_t> read_uint8(const std::string& dataset) const;
  // `count` values from `offset` of a 1-D float dataset (HDF5 verifies the checksum of every
  // chunk it reads).
  void read_float_slice(const std::string& dataset, int64_t offset, int64_t count, float* out) const;
  // Chunked, with Fletcher32 checksums; groups in the path ("a/b/c") are created.
  void write_float(const std::string& dataset, const std::vector<hsize_t>& shape, const float* values);
  void write_int64(const std::string& dataset, const std::vector<hsize_t>& shape, const int64_t* values);
  void write_uint32(const std::string& dataset, const std::vector<hsize_t>& shape, const uint32_t* values);
  void write_uint8(const std::string& dataset, const std::vector<hsize_t>& shape, const uint8_t* values);
  // A string attribute of the file's root group.
  void set_attribute(const std::string& name, const std::string& value);
  // The string attribute `name` of the root group; empty when there is none.
  std::string attribute(const std::string& name) const;
  // The string attribute `name` of a dataset; empty when there is none.
  std::string dataset_attribute(const std::string& dataset, const std::string& name) const;

  // A 1-D dataset of `count` elements of `file_type` (H5T_IEEE_F32LE…) stored contiguously,
  // allocated now and never filled: the caller writes its bytes at the returned file offset
  // itself (contiguous_extent). No chunks, no filters, so any HDF5 reader reads it as is.
  uint64_t create_contiguous(const std::string& dataset, hid_t file_type, uint64_t count);
  struct Extent {
    uint64_t offset = 0;  // in the file
    uint64_t bytes = 0;
    size_t element_bytes = 0;
  };
  // Where a contiguous dataset's bytes lie; an error for a chunked or unallocated one.
  Extent contiguous_extent(const std::string& dataset) const;
  // Numeric attributes of a dataset.
  void write_attribute(const std::string& dataset, const std::string& name, const std::vector<uint32_t>& values);
  void write_attribute(const std::string& dataset, const std::string& name, uint64_t value);
  std::vector<uint32_t> read_uint32_attribute(const std::string& dataset, const std::string& name) const;
  uint64_t read_uint64_attribute(const std::string& dataset, const std::string& name) const;

 private:
  void write(const std::string& dataset, const std::vector<hsize_t>& shape, hid_t memory_type, const void* values);
  Hdf5Handle open_dataset(const std::string& dataset) const;
  std::string path_;
  Hdf5Handle file_;
};

}  // namespace superoffload::io
