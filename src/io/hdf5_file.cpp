// Hdf5File implementation.
#include "io/hdf5_file.hpp"

#include <algorithm>

#include "io/check_hdf5.hpp"

namespace superoffload::io {

Hdf5File Hdf5File::open_read(const std::string& path) {
  Hdf5File file;
  file.path_ = path;
  file.file_ = Hdf5Handle(SO_CHECK_HDF5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening " << path),
                          H5Fclose);
  return file;
}

Hdf5File Hdf5File::open_read_swmr(const std::string& path) {
  Hdf5File file;
  file.path_ = path;
  const Hdf5Handle access(SO_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS), "file access properties"), H5Pclose);
  SO_CHECK_HDF5(H5Pset_libver_bounds(access.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), "file format bounds");
  file.file_ = Hdf5Handle(
      SO_CHECK_HDF5(H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, access.get()), "opening " << path), H5Fclose);
  return file;
}

Hdf5File Hdf5File::create(const std::string& path, const CreateOptions& options) {
  Hdf5File file;
  file.path_ = path;
  const Hdf5Handle access(SO_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS), "file access properties"), H5Pclose);
  if (options.latest_format) {
    SO_CHECK_HDF5(H5Pset_libver_bounds(access.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), "file format bounds");
  }
  if (options.metadata_block_bytes > 0) {
    SO_CHECK_HDF5(H5Pset_meta_block_size(access.get(), options.metadata_block_bytes), "metadata block size");
  }
  file.file_ = Hdf5Handle(SO_CHECK_HDF5(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()),
                                        "creating " << path),
                          H5Fclose);
  return file;
}

void Hdf5File::close() {
  if (file_.get() < 0) return;
  SO_CHECK_HDF5(H5Fflush(file_.get(), H5F_SCOPE_LOCAL), "flushing " << path_);
  const hid_t id = file_.release();
  SO_CHECK_HDF5(H5Fclose(id), "closing " << path_);
}

bool Hdf5File::has(const std::string& dataset) const {
  return H5Lexists(file_.get(), dataset.c_str(), H5P_DEFAULT) > 0;
}

Hdf5Handle Hdf5File::open_dataset(const std::string& dataset) const {
  SO_CHECK(has(dataset), path_ << " has no dataset \"" << dataset << "\"");
  return Hdf5Handle(SO_CHECK_HDF5(H5Dopen2(file_.get(), dataset.c_str(), H5P_DEFAULT), "opening " << path_ << ":" << dataset),
                    H5Dclose);
}

std::vector<hsize_t> Hdf5File::shape(const std::string& dataset) const {
  const auto set = open_dataset(dataset);
  const Hdf5Handle space(SO_CHECK_HDF5(H5Dget_space(set.get()), path_ << ":" << dataset), H5Sclose);
  const int rank = SO_CHECK_HDF5(H5Sget_simple_extent_ndims(space.get()), path_ << ":" << dataset);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  SO_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), path_ << ":" << dataset);
  return dims;
}

namespace {

template <class T>
Array<T> read_all(const Hdf5File& file, hid_t dataset, hid_t memory_type, const std::string& name,
                  std::vector<hsize_t> shape) {
  Array<T> out;
  out.shape = std::move(shape);
  size_t count = 1;
  for (auto d : out.shape) count *= d;
  out.values.resize(count);
  SO_CHECK_HDF5(H5Dread(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.values.data()),
                "reading " << file.path() << ":" << name);
  return out;
}

}  // namespace

std::string StoredType::describe() const {
  return std::string(integer ? (is_signed ? "int" : "uint") : "non-integer ") + std::to_string(8 * bytes) +
         (integer ? "" : "-bit");
}

StoredType Hdf5File::stored_type(const std::string& dataset) const {
  const auto set = open_dataset(dataset);
  const Hdf5Handle type(H5Dget_type(set.get()), H5Tclose);
  SO_CHECK(type.get() >= 0, "reading the type of " << path_ << ":" << dataset);
  StoredType stored;
  stored.integer = H5Tget_class(type.get()) == H5T_INTEGER;
  stored.is_signed = stored.integer && H5Tget_sign(type.get()) == H5T_SGN_2;
  stored.bytes = H5Tget_size(type.get());
  return stored;
}

Array<int64_t> Hdf5File::read_int64(const std::string& dataset) const {
  const auto set = open_dataset(dataset);
  return read_all<int64_t>(*this, set.get(), H5T_NATIVE_INT64, dataset, shape(dataset));
}

Array<float> Hdf5File::read_float(const std::string& dataset) const {
  const auto set = open_dataset(dataset);
  return read_all<float>(*this, set.get(), H5T_NATIVE_FLOAT, dataset, shape(dataset));
}

Array<double> Hdf5File::read_double(const std::string& dataset) const {
  const auto set = open_dataset(dataset);
  return read_all<double>(*this, set.get(), H5T_NATIVE_DOUBLE, dataset, shape(dataset));
}

Array<uint32_t> Hdf5File::read_uint32(const std::string& dataset) const {
  const auto set = open_dataset(dataset);
  return read_all<uint32_t>(*this, set.get(), H5T_NATIVE_UINT32, dataset, shape(dataset));
}

Array<uint8_t> Hdf5File::read_uint8(const std::string& dataset) const {
  const auto set = open_dataset(dataset);
  return read_all<uint8_t>(*this, set.get(), H5T_NATIVE_UINT8, dataset, shape(dataset));
}

void Hdf5File::read_float_slice(const std::string& dataset, int64_t offset, int64_t count, float* out) const {
  const auto set = open_dataset(dataset);
  const Hdf5Handle space(SO_CHECK_HDF5(H5Dget_space(set.get()), path_ << ":" << dataset), H5Sclose);
  const hsize_t start = static_cast<hsize_t>(offset), length = static_cast<hsize_t>(count);
  SO_CHECK_HDF5(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, &start, nullptr, &length, nullptr),
                "selecting [" << offset << ", +" << count << ") of " << path_ << ":" << dataset);
  const Hdf5Handle memory(SO_CHECK_HDF5(H5Screate_simple(1, &length, nullptr), "memory space"), H5Sclose);
  SO_CHECK_HDF5(H5Dread(set.get(), H5T_NATIVE_FLOAT, memory.get(), space.get(), H5P_DEFAULT, out),
                "reading " << path_ << ":" << dataset);
}

void Hdf5File::write(const std::string& dataset, const std::vector<hsize_t>& shape, hid_t memory_type,
                     const void* values) {
  const Hdf5Handle space(SO_CHECK_HDF5(H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr),
                                       "dataspace for " << dataset),
                         H5Sclose);
  const Hdf5Handle properties(SO_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE), "properties for " << dataset), H5Pclose);
  size_t count = 1;
  for (auto d : shape) count *= d;
  if (count > 0 && !shape.empty()) {
    // Chunks of about 1 MiB along the first dimension; checksummed.
    std::vector<hsize_t> chunk = shape;
    size_t row = 1;
    for (size_t i = 1; i < shape.size(); ++i) row *= shape[i];
    chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(shape[0], (1u << 18) / std::max<size_t>(1, row)));
    for (size_t i = 1; i < chunk.size(); ++i) chunk[i] = std::max<hsize_t>(1, chunk[i]);
    SO_CHECK_HDF5(H5Pset_chunk(properties.get(), static_cast<int>(chunk.size()), chunk.data()), "chunking " << dataset);
    SO_CHECK_HDF5(H5Pset_fletcher32(properties.get()), "checksumming " << dataset);
  }
  const Hdf5Handle links(SO_CHECK_HDF5(H5Pcreate(H5P_LINK_CREATE), "link properties"), H5Pclose);
  SO_CHECK_HDF5(H5Pset_create_intermediate_group(links.get(), 1), "intermediate groups for " << dataset);
  const Hdf5Handle set(SO_CHECK_HDF5(H5Dcreate2(file_.get(), dataset.c_str(), memory_type, space.get(), links.get(),
                                                properties.get(), H5P_DEFAULT),
                                     "creating " << path_ << ":" << dataset),
                       H5Dclose);
  SO_CHECK_HDF5(H5Dwrite(set.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values),
                "writing " << path_ << ":" << dataset);
}

void Hdf5File::write_float(const std::string& dataset, const std::vector<hsize_t>& shape, const float* values) {
  write(dataset, shape, H5T_NATIVE_FLOAT, values);
}

void Hdf5File::write_int64(const std::string& dataset, const std::vector<hsize_t>& shape, const int64_t* values) {
  write(dataset, shape, H5T_NATIVE_INT64, values);
}

void Hdf5File::write_uint32(const std::string& dataset, const std::vector<hsize_t>& shape, const uint32_t* values) {
  write(dataset, shape, H5T_NATIVE_UINT32, values);
}

void Hdf5File::write_uint8(const std::string& dataset, const std::vector<hsize_t>& shape, const uint8_t* values) {
  write(dataset, shape, H5T_NATIVE_UINT8, values);
}

namespace {

// A fixed-length, null-padded UTF-8 string type of `size` bytes.
Hdf5Handle string_type(size_t size) {
  Hdf5Handle type(SO_CHECK_HDF5(H5Tcopy(H5T_C_S1), "string type"), H5Tclose);
  SO_CHECK_HDF5(H5Tset_size(type.get(), std::max<size_t>(1, size)), "string type size");
  SO_CHECK_HDF5(H5Tset_cset(type.get(), H5T_CSET_UTF8), "string type charset");
  SO_CHECK_HDF5(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "string type padding");
  return type;
}

}  // namespace

void write_string_attribute(hid_t object, const std::string& name, const std::string& value) {
  if (H5Aexists(object, name.c_str()) > 0) SO_CHECK_HDF5(H5Adelete(object, name.c_str()), "replacing attribute " << name);
  const auto type = string_type(value.size());
  const Hdf5Handle space(SO_CHECK_HDF5(H5Screate(H5S_SCALAR), "attribute space"), H5Sclose);
  const Hdf5Handle attribute(
      SO_CHECK_HDF5(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), "attribute " << name),
      H5Aclose);
  const std::string stored = value.empty() ? std::string(1, '\0') : value;
  SO_CHECK_HDF5(H5Awrite(attribute.get(), type.get(), stored.data()), "writing attribute " << name);
}

void Hdf5File::set_attribute(const std::string& name, const std::string& value) {
  write_string_attribute(file_.get(), name, value);
}

namespace {

// A fixed-length string attribute of `object`; empty when there is none or it is not one.
std::string string_attribute(hid_t object, const std::string& name) {
  if (H5Aexists(object, name.c_str()) <= 0) return {};
  const Hdf5Handle attribute(SO_CHECK_HDF5(H5Aopen(object, name.c_str(), H5P_DEFAULT), "attribute " << name), H5Aclose);
  const Hdf5Handle type(SO_CHECK_HDF5(H5Aget_type(attribute.get()), "type of attribute " << name), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) return {};
  std::string value(H5Tget_size(type.get()), '\0');
  SO_CHECK_HDF5(H5Aread(attribute.get(), type.get(), value.data()), "reading attribute " << name);
  value.resize(value.find('\0') == std::string::npos ? value.size() : value.find('\0'));
  return value;
}

}  // namespace

std::string Hdf5File::attribute(const std::string& name) const { return string_attribute(file_.get(), name); }

std::string Hdf5File::dataset_attribute(const std::string& dataset, const std::string& name) const {
  return string_attribute(open_dataset(dataset).get(), name);
}

uint64_t Hdf5File::create_contiguous(const std::string& dataset, hid_t file_type, uint64_t count) {
  const hsize_t dims = count;
  const Hdf5Handle space(SO_CHECK_HDF5(H5Screate_simple(1, &dims, nullptr), "dataspace for " << dataset), H5Sclose);
  const Hdf5Handle properties(SO_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE), "properties for " << dataset), H5Pclose);
  SO_CHECK_HDF5(H5Pset_layout(properties.get(), H5D_CONTIGUOUS), "layout of " << dataset);
  // Space reserved at creation, and no fill values written into it: the caller's bytes are
  // the only write of the data.
  SO_CHECK_HDF5(H5Pset_alloc_time(properties.get(), H5D_ALLOC_TIME_EARLY), "allocation of " << dataset);
  SO_CHECK_HDF5(H5Pset_fill_time(properties.get(), H5D_FILL_TIME_NEVER), "fill of " << dataset);
  const Hdf5Handle links(SO_CHECK_HDF5(H5Pcreate(H5P_LINK_CREATE), "link properties"), H5Pclose);
  SO_CHECK_HDF5(H5Pset_create_intermediate_group(links.get(), 1), "intermediate groups for " << dataset);
  const Hdf5Handle set(SO_CHECK_HDF5(H5Dcreate2(file_.get(), dataset.c_str(), file_type, space.get(), links.get(),
                                                properties.get(), H5P_DEFAULT),
                                     "creating " << path_ << ":" << dataset),
                       H5Dclose);
  if (count == 0) return 0;
  const haddr_t offset = H5Dget_offset(set.get());
  SO_CHECK(offset != HADDR_UNDEF, path_ << ":" << dataset << " was not allocated at creation");
  return offset;
}

Hdf5File::Extent Hdf5File::contiguous_extent(const std::string& dataset) const {
  const auto set = open_dataset(dataset);
  const Hdf5Handle properties(SO_CHECK_HDF5(H5Dget_create_plist(set.get()), path_ << ":" << dataset), H5Pclose);
  SO_CHECK(H5Pget_layout(properties.get()) == H5D_CONTIGUOUS,
           path_ << ":" << dataset << " is not stored contiguously (a checkpoint of another format?)");
  const Hdf5Handle type(SO_CHECK_HDF5(H5Dget_type(set.get()), path_ << ":" << dataset), H5Tclose);
  Extent extent;
  extent.element_bytes = H5Tget_size(type.get());
  size_t count = 1;
  for (auto d : shape(dataset)) count *= d;
  extent.bytes = count * extent.element_bytes;
  if (extent.bytes == 0) return extent;
  extent.offset = H5Dget_offset(set.get());
  SO_CHECK(extent.offset != HADDR_UNDEF, path_ << ":" << dataset << " has no storage");
  return extent;
}

namespace {

template <class T>
void write_numeric_attribute(hid_t file, const std::string& path, const std::string& object, const std::string& name,
                             hid_t file_type, hid_t memory_type, const T* values, hsize_t count, bool scalar) {
  const Hdf5Handle space(SO_CHECK_HDF5(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &count, nullptr),
                                       "attribute space"),
                         H5Sclose);
  const Hdf5Handle attribute(SO_CHECK_HDF5(H5Acreate_by_name(file, object.c_str(), name.c_str(), file_type, space.get(),
                                                             H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                           "attribute " << name << " of " << path << ":" << object),
                             H5Aclose);
  SO_CHECK_HDF5(H5Awrite(attribute.get(), memory_type, values), "writing attribute " << name << " of " << path << ":" << object);
}

template <class T>
std::vector<T> read_numeric_attribute(hid_t file, const std::string& path, const std::string& object,
                                      const std::string& name, hid_t memory_type) {
  SO_CHECK(H5Aexists_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT) > 0,
           path << ":" << object << " has no attribute \"" << name << "\"");
  const Hdf5Handle attribute(
      SO_CHECK_HDF5(H5Aopen_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
                    "attribute " << name << " of " << path << ":" << object),
      H5Aclose);
  const Hdf5Handle space(SO_CHECK_HDF5(H5Aget_space(attribute.get()), "attribute space"), H5Sclose);
  const auto count = SO_CHECK_HDF5(H5Sget_simple_extent_npoints(space.get()), "attribute size");
  std::vector<T> values(static_cast<size_t>(count));
  SO_CHECK_HDF5(H5Aread(attribute.get(), memory_type, values.data()),
                "reading attribute " << name << " of " << path << ":" << object);
  return values;
}

}  // namespace

void Hdf5File::write_attribute(const std::string& dataset, const std::string& name, const std::vector<uint32_t>& values) {
  write_numeric_attribute(file_.get(), path_, dataset, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, values.data(),
                          values.size(), false);
}

void Hdf5File::write_attribute(const std::string& dataset, const std::string& name, uint64_t value) {
  write_numeric_attribute(file_.get(), path_, dataset, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value, 1, true);
}

std::vector<uint32_t> Hdf5File::read_uint32_attribute(const std::string& dataset, const std::string& name) const {
  return read_numeric_attribute<uint32_t>(file_.get(), path_, dataset, name, H5T_NATIVE_UINT32);
}

uint64_t Hdf5File::read_uint64_attribute(const std::string& dataset, const std::string& name) const {
  const auto values = read_numeric_attribute<uint64_t>(file_.get(), path_, dataset, name, H5T_NATIVE_UINT64);
  SO_CHECK(values.size() == 1, path_ << ":" << dataset << " attribute \"" << name << "\" is not one number");
  return values[0];
}

}  // namespace superoffload::io
