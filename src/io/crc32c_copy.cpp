// crc32c_copy: a copy that checksums what it copies in the same pass over the source.
//
// Why: a checked read from the page cache is a copy plus a CRC. As two passes on one core the
// CRC (ISA-L, ~24 GB/s on Zen 3) costs a third of the copy (~10 GB/s); fused, each 8-byte word
// is loaded once, stored once and fed to the CPU's CRC32C instruction, whose throughput is
// above the memory's, so the checksum is nearly free.
//
// How: the instruction has a latency of three cycles and a throughput of one, so three
// independent lanes run side by side, each over its own stretch of kLane bytes; their CRCs
// are then joined. The raw CRC register (without CRC32C's initial and final inversion) is
// linear over GF(2): the register after lane A then lane B is shift(a) ^ b, where a is lane
// A's register, b lane B's register started from 0, and shift() the effect of kLane zero
// bytes, a 32x32 bit matrix (built by squaring, applied through four 256-entry tables).
#include <algorithm>
#include <array>
#include <cstring>

#include "io/crc32c.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_acle.h>
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#endif

namespace superoffload::io {

namespace {

constexpr size_t kLane = size_t{32} << 10;  // bytes per lane: long, as each join stalls all three lanes
constexpr uint32_t kPolynomial = 0x82F63B78u;  // CRC32C, bit-reflected

// A linear map of the raw register, as the images of its 32 bits.
using Matrix = std::array<uint32_t, 32>;

uint32_t times(const Matrix& m, uint32_t v) {
  uint32_t out = 0;
  for (int bit = 0; v != 0; ++bit, v >>= 1) {
    if (v & 1u) out ^= m[bit];
  }
  return out;
}

Matrix square(const Matrix& m) {
  Matrix out{};
  for (int bit = 0; bit < 32; ++bit) out[bit] = times(m, m[bit]);
  return out;
}

struct LaneShift {
  std::array<std::array<uint32_t, 256>, 4> table{};
  LaneShift() {
    // One zero bit shifts the register right and folds in the polynomial; eight of them are
    // a zero byte; squaring doubles the count, so log2(kLane) squarings give kLane bytes.
    Matrix bit_step{};
    bit_step[0] = kPolynomial;
    for (int bit = 1; bit < 32; ++bit) bit_step[bit] = 1u << (bit - 1);
    Matrix lane = square(square(square(bit_step)));  // one byte
    static_assert((kLane & (kLane - 1)) == 0, "kLane is a power of two");
    for (size_t bytes = 1; bytes < kLane; bytes *= 2) lane = square(lane);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) table[k][b] = times(lane, b << (8 * k));
    }
  }
  uint32_t operator()(uint32_t crc) const {
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^ table[3][crc >> 24];
  }
};

const LaneShift& lane_shift() {
  static const LaneShift shift;
  return shift;
}

uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void store64(unsigned char* p, uint64_t v) { std::memcpy(p, &v, 8); }

// The CPU's CRC32C instructions on the raw register: one 8-byte word, one byte.
#if defined(__x86_64__)
#define SO_CRC_TARGET __attribute__((target("sse4.2")))
SO_CRC_TARGET inline uint64_t step8(uint64_t crc, uint64_t word) { return _mm_crc32_u64(crc, word); }
SO_CRC_TARGET inline uint32_t step1(uint32_t crc, unsigned char byte) { return _mm_crc32_u8(crc, byte); }
bool native_supported() { return __builtin_cpu_supports("sse4.2"); }
#elif defined(__aarch64__)
#define SO_CRC_TARGET __attribute__((target("+crc")))
SO_CRC_TARGET inline uint64_t step8(uint64_t crc, uint64_t word) { return __crc32cd(static_cast<uint32_t>(crc), word); }
SO_CRC_TARGET inline uint32_t step1(uint32_t crc, unsigned char byte) { return __crc32cb(crc, byte); }
bool native_supported() { return (::getauxval(AT_HWCAP) & HWCAP_CRC32) != 0; }
#endif

#ifdef SO_CRC_TARGET
// The fused loop; returns the raw register after `size` bytes from `crc`.
SO_CRC_TARGET uint32_t fused_native(unsigned char* dst, const unsigned char* src, size_t size, uint32_t crc) {
  const LaneShift& shift = lane_shift();
  while (size >= 3 * kLane) {
    uint64_t a = crc, b = 0, c = 0;
    for (size_t i = 0; i < kLane; i += 8) {
      const uint64_t x = load64(src + i), y = load64(src + kLane + i), z = load64(src + 2 * kLane + i);
      a = step8(a, x);
      b = step8(b, y);
      c = step8(c, z);
      store64(dst + i, x);
      store64(dst + kLane + i, y);
      store64(dst + 2 * kLane + i, z);
    }
    crc = shift(shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(c);
    src += 3 * kLane;
    dst += 3 * kLane;
    size -= 3 * kLane;
  }
  uint64_t r = crc;
  for (; size >= 8; size -= 8, src += 8, dst += 8) {
    const uint64_t x = load64(src);
    r = step8(r, x);
    store64(dst, x);
  }
  for (; size > 0; --size, ++src, ++dst) {
    r = step1(static_cast<uint32_t>(r), *src);
    *dst = *src;
  }
  return static_cast<uint32_t>(r);
}
#else
uint32_t fused_native(unsigned char*, const unsigned char*, size_t, uint32_t crc) { return crc; }
bool native_supported() { return false; }
#endif

}  // namespace

const char* crc32c_copy_method() {
  if (!native_supported()) return "ISA-L's CRC32C and memcpy (no CRC32C instructions)";
#if defined(__x86_64__)
  return "a fused copy with SSE 4.2 CRC32C instructions";
#else
  return "a fused copy with Arm CRC32C instructions";
#endif
}

uint32_t crc32c_copy(void* destination, const void* source, size_t size, uint32_t previous) {
  static const bool native = native_supported();
  auto* dst = static_cast<unsigned char*>(destination);
  const auto* src = static_cast<const unsigned char*>(source);
  if (native) return ~fused_native(dst, src, size, ~previous);
  // Without the instructions: ISA-L's CRC and a copy, in pieces small enough to stay in cache
  // between the two.
  constexpr size_t kPiece = size_t{64} << 10;
  uint32_t crc = previous;
  for (size_t at = 0; at < size; at += kPiece) {
    const size_t n = std::min(kPiece, size - at);
    crc = crc32c(src + at, n, crc);
    std::memcpy(dst + at, src + at, n);
  }
  return crc;
}

}  // namespace superoffload::io
