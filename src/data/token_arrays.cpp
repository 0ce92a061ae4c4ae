// Token files.
#include "data/token_arrays.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "base/error.hpp"
#include "io/hdf5_file.hpp"

namespace superoffload::data {

TokenArrays read_token_file(const std::string& path) {
  SO_CHECK(std::filesystem::exists(path), "the dataset " << path << " does not exist" << hint("check [data] path"));
  const auto file = io::Hdf5File::open_read(path);
  SO_CHECK(file.has("tokens"), path << " has no dataset \"tokens\""
                                    << hint("write it with superoffload prepare (see datasets/README.md)"));
  TokenArrays arrays;
  // HDF5 would convert any stored type: floats truncated, negative ids clipped to 0. Only
  // integers are token ids, and each must fit the 32-bit ids the dataset holds.
  const auto stored = file.stored_type("tokens");
  SO_CHECK(stored.integer, path << ": dataset \"tokens\" holds " << stored.describe() << " values, not token ids"
                                << hint("token ids are integers; write them with superoffload prepare"));
  io::Array<uint32_t> tokens;
  if (stored.is_signed || stored.bytes > 4) {
    auto wide = file.read_int64("tokens");
    for (size_t i = 0; i < wide.values.size(); ++i) {
      SO_CHECK(wide.values[i] >= 0 && wide.values[i] <= int64_t{UINT32_MAX},
               path << ": dataset \"tokens\" element " << i << " is " << wide.values[i]
                    << ", not a token id (ids lie in [0, 2^32))" << hint("the file is corrupt or not a token file"));
    }
    tokens.shape = wide.shape;
    tokens.values.assign(wide.values.begin(), wide.values.end());
  } else {
    tokens = file.read_uint32("tokens");
  }
  arrays.tokens = std::move(tokens.values);
  if (tokens.shape.size() == 2) {
    arrays.row_length = static_cast<int64_t>(tokens.shape[1]);
    if (file.has("loss_mask")) {
      // HDF5 would convert 0.5 to 0 and 256 to 255: only integer 0/1 flags are a mask.
      const auto mask_type = file.stored_type("loss_mask");
      SO_CHECK(mask_type.integer, path << ": dataset \"loss_mask\" holds " << mask_type.describe()
                                       << " values; a loss mask holds integers 0 and 1");
      auto mask = file.read_int64("loss_mask");
      SO_CHECK(mask.shape == tokens.shape, path << ": \"loss_mask\" must have the shape of \"tokens\"");
      const auto bad = std::find_if(mask.values.begin(), mask.values.end(), [](int64_t m) { return m != 0 && m != 1; });
      SO_CHECK(bad == mask.values.end(), path << ": dataset \"loss_mask\" element " << (bad - mask.values.begin())
                                              << " is " << *bad << "; a loss mask holds 0 and 1 only");
      arrays.loss_mask.assign(mask.values.begin(), mask.values.end());
    }
  } else {
    SO_CHECK(tokens.shape.size() == 1, path << ": \"tokens\" must be 1-D (a stream) or 2-D (samples)");
  }
  if (file.has("doc_offsets")) {
    SO_CHECK(file.stored_type("doc_offsets").integer, path << ": dataset \"doc_offsets\" must hold integers");
    arrays.doc_offsets = file.read_int64("doc_offsets").values;
    const auto n = static_cast<int64_t>(arrays.tokens.size());
    for (size_t i = 0; i < arrays.doc_offsets.size(); ++i) {
      const int64_t offset = arrays.doc_offsets[i], previous = i > 0 ? arrays.doc_offsets[i - 1] : 0;
      SO_CHECK(offset >= previous && offset <= n,
               path << ": dataset \"doc_offsets\" element " << i << " is " << offset << "; offsets rise from 0 to "
                    << "the " << n << " tokens" << hint("the file is corrupt; write it again with superoffload prepare"));
    }
  }
  return arrays;
}

void write_token_file(const std::string& path, const TokenArrays& arrays,
                      const std::map<std::string, std::string>& attributes) {
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  // Written under a temporary name and renamed: a crash never leaves a half file at `path`.
  const std::string partial = path + ".partial";
  {
    auto file = io::Hdf5File::create(partial);
    if (arrays.row_length > 0) {
      const std::vector<hsize_t> shape{static_cast<hsize_t>(arrays.rows()), static_cast<hsize_t>(arrays.row_length)};
      file.write_uint32("tokens", shape, arrays.tokens.data());
      if (!arrays.loss_mask.empty()) file.write_uint8("loss_mask", shape, arrays.loss_mask.data());
    } else {
      file.write_uint32("tokens", {arrays.tokens.size()}, arrays.tokens.data());
    }
    if (!arrays.doc_offsets.empty()) file.write_int64("doc_offsets", {arrays.doc_offsets.size()}, arrays.doc_offsets.data());
    for (const auto& [name, value] : attributes) file.set_attribute(name, value);
  }
  std::filesystem::rename(partial, path);
}

}  // namespace superoffload::data
