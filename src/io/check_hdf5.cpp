// HDF5 error-stack decoding.
#include "io/check_hdf5.hpp"

#include <vector>

namespace superoffload::detail {
namespace {

herr_t collect(unsigned /*n*/, const H5E_error2_t* entry, void* data) {
  auto* lines = static_cast<std::vector<std::string>*>(data);
  std::string line = entry->desc ? entry->desc : "";
  if (entry->func_name) line += std::string(" (in ") + entry->func_name + ")";
  lines->push_back(std::move(line));
  return 0;
}

}  // namespace

std::string describe_hdf5_error_stack() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &lines);
  H5Eclear2(H5E_DEFAULT);
  if (lines.empty()) return "no HDF5 error message";
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "; ";
    out += lines[i];
  }
  return out;
}

void configure_hdf5() {
  H5dont_atexit();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

}  // namespace superoffload::detail
