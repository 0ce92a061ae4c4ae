# Cross compiling for 64-bit Arm (Grace, Neoverse V2) with Debian's aarch64 toolchain.
# Programs run under qemu-aarch64 with every optional feature of the emulated CPU (SVE and SVE2
# included) and 128-bit SVE vectors, Grace's length.
#
# Two ways to find the arm64 libraries:
# - SUPEROFFLOAD_AARCH64_SYSROOT set (scripts/setup --target aarch64): a sysroot of arm64
#   Debian packages unpacked under build-aarch64/, used for headers, libraries, pkg-config and
#   as qemu's -L root. The whole program is built this way.
# - unset: Debian multiarch packages installed on the host (/usr/lib/aarch64-linux-gnu), as
#   for the standalone kernel test in tests/cross.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# try_compile projects read the toolchain file again: hand them the sysroot.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES SUPEROFFLOAD_AARCH64_SYSROOT)
if(NOT SUPEROFFLOAD_AARCH64_SYSROOT AND DEFINED ENV{SUPEROFFLOAD_AARCH64_SYSROOT})
  set(SUPEROFFLOAD_AARCH64_SYSROOT "$ENV{SUPEROFFLOAD_AARCH64_SYSROOT}")
endif()

set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)   # protoc and friends run on the build host
if(SUPEROFFLOAD_AARCH64_SYSROOT)
  set(_so_sysroot "${SUPEROFFLOAD_AARCH64_SYSROOT}")
  set(CMAKE_SYSROOT "${_so_sysroot}")
  set(CMAKE_FIND_ROOT_PATH "${_so_sysroot}")
  set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
  set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
  set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
  set(ENV{PKG_CONFIG_SYSROOT_DIR} "${_so_sysroot}")
  set(ENV{PKG_CONFIG_LIBDIR}
    "${_so_sysroot}/usr/lib/aarch64-linux-gnu/pkgconfig:${_so_sysroot}/usr/lib/pkgconfig:${_so_sysroot}/usr/share/pkgconfig")
  # The host's mpicc and h5cc would report the host's (x86) paths: name Open MPI's header and
  # library in the sysroot (Debian's layout) and let FindHDF5 search without its wrapper.
  set(MPI_SKIP_COMPILER_WRAPPER TRUE)
  set(MPI_C_HEADER_DIR "${_so_sysroot}/usr/lib/aarch64-linux-gnu/openmpi/include" CACHE PATH "")
  set(MPI_C_LIB_NAMES mpi CACHE STRING "")
  set(MPI_mpi_LIBRARY "${_so_sysroot}/usr/lib/aarch64-linux-gnu/openmpi/lib/libmpi.so" CACHE FILEPATH "")
  set(HDF5_C_COMPILER_EXECUTABLE "" CACHE FILEPATH "no HDF5 compiler wrapper when cross compiling")
  set(_so_qemu_root "${_so_sysroot}")
else()
  set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
  set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
  set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
  set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
  # The multiarch libc6:arm64 (its ld.so and libc.so together). Not /usr/aarch64-linux-gnu: its
  # ld.so is the cross toolchain's glibc build, and paired with the multiarch libc.so.6 that
  # libraries in /lib/aarch64-linux-gnu load, the two disagree on ld.so's private state; the
  # first thread a program starts then spins for ever in the stack cache.
  set(_so_qemu_root /)
endif()
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;${_so_qemu_root};-cpu;max,sve-default-vector-length=16)
