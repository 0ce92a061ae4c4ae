// CRC32C (Castagnoli, the iSCSI/ext4/RFC 3720 polynomial), the checksum of checkpoint format 2.
// Computed by Intel's ISA-L (Debian's libisal): hardware CRC instructions with carry-less
// multiply folding on x86-64 and on Arm, at tens of GB/s on data in cache, so a checkpoint
// can be checksummed as fast as it is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace superoffload::io {

// The CRC32C of `size` bytes, continuing from `previous` (the CRC of the bytes before them;
// 0 to start), as zlib's crc32 chains: crc32c(b, crc32c(a)) is the CRC of a then b.
// crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t previous = 0);

// Copies `size` bytes from `source` to `destination` (not overlapping) and returns their
// CRC32C continuing from `previous`, reading the source once: crc32c_copy(d, s, n, p) ==
// crc32c(s, n, p) with d holding a copy of s. With the CPU's CRC32C instructions (SSE 4.2 on
// x86-64, the CRC extension on Arm) it runs at about the speed of memcpy; without them it is
// ISA-L's CRC and a copy.
uint32_t crc32c_copy(void* destination, const void* source, size_t size, uint32_t previous = 0);
// How crc32c_copy runs on this CPU, for benchmarks' output.
const char* crc32c_copy_method();

// The CRC32C of a whole file, read sequentially.
uint32_t file_crc32c(const std::filesystem::path& path);

}  // namespace superoffload::io
