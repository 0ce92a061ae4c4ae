// Version report of the project and every library it uses.
#include "train/build_info.hpp"

#include <hdf5.h>
#include <hwloc.h>
#include <mpi.h>

#include <boost/version.hpp>

#include "base/build_config.hpp"
#include "cluster/cpu_bf16.hpp"
#include "cluster/cpu_model.hpp"
#include "cluster/gpu_devices.hpp"
#include "io/crc32c.hpp"
#include "model/torch_cuda_backend.hpp"
#include "optim/cpu_adamw.hpp"

namespace superoffload::train {

std::string project_version() { return SUPEROFFLOAD_VERSION; }
std::string git_revision() { return superoffload_git_revision(); }
bool cuda_compiled() { return SUPEROFFLOAD_WITH_CUDA != 0; }

std::vector<std::pair<std::string, std::string>> software_versions() {
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("superoffload", project_version() + " (git " + git_revision() + ", " + SUPEROFFLOAD_BUILD_TYPE +
                                       ", " + SUPEROFFLOAD_COMPILER + ")");
  out.emplace_back("LibTorch", torch_version() + " (C++11 ABI: " + (torch_cxx11_abi() ? "yes" : "no") + ")");
  const cluster::CudaVersions cuda = cluster::cuda_versions();
  if (cuda.compiled) {
    const model::TorchCudaBackend& backend = model::torch_cuda_backend();
    out.emplace_back("CUDA", "compiled in: runtime " + cuda.runtime_compiled + " (loaded " + cuda.runtime_loaded +
                                 "), driver " + cuda.driver + "; LibTorch's CUDA backend " +
                                 (backend.loaded ? "loaded" : "not loaded: " + backend.why_not));
    out.emplace_back("NCCL", "compiled in: " + cuda.nccl_compiled + " (loaded " + cuda.nccl_loaded + ")");
  } else {
    out.emplace_back("CUDA", "not compiled in (CPU-only build: " SUPEROFFLOAD_CUDA_SUMMARY ")");
    out.emplace_back("NCCL", "not compiled in");
  }
  char mpi_library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  std::string mpi = "unknown";
  if (MPI_Get_library_version(mpi_library, &length) == MPI_SUCCESS) {
    mpi.assign(mpi_library, static_cast<size_t>(length));
    if (auto comma = mpi.find(','); comma != std::string::npos) mpi.resize(comma);  // drop the build details
    while (!mpi.empty() && (mpi.back() == '\n' || mpi.back() == ' ' || mpi.back() == '\0')) mpi.pop_back();
  }
  int mpi_major = 0, mpi_minor = 0;
  MPI_Get_version(&mpi_major, &mpi_minor);
  out.emplace_back("MPI", mpi + " (MPI " + std::to_string(mpi_major) + "." + std::to_string(mpi_minor) + ")");
  unsigned h5_major = 0, h5_minor = 0, h5_release = 0;
  H5get_libversion(&h5_major, &h5_minor, &h5_release);
  out.emplace_back("HDF5", std::to_string(h5_major) + "." + std::to_string(h5_minor) + "." + std::to_string(h5_release));
  out.emplace_back("Boost", std::to_string(BOOST_VERSION / 100000) + "." + std::to_string(BOOST_VERSION / 100 % 1000) +
                                "." + std::to_string(BOOST_VERSION % 100));
  const unsigned hw = hwloc_get_api_version();
  out.emplace_back("hwloc", std::string(HWLOC_VERSION) + " (API " + std::to_string(hw >> 16) + "." +
                                std::to_string((hw >> 8) & 0xff) + ")");
  out.emplace_back("TOML++ / CLI11 / nlohmann-json", SUPEROFFLOAD_HEADER_LIBS);
  // The code paths this CPU takes: what differs between an x86 node and Grace. Read once (every
  // checkpoint's manifest records these lines; the CPU does not change under a run).
  static const std::string cpu = cluster::cpu_model() + "; AdamW kernel " + optim::adamw_target() +
                                 "; native bf16 " + (cluster::cpu_has_native_bf16() ? "yes" : "no") +
                                 "; checkpoint CRC32C " + io::crc32c_copy_method();
  out.emplace_back("CPU", cpu);
  return out;
}

}  // namespace superoffload::train
