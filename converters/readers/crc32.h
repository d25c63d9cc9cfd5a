// CRC-32 (the zip polynomial) through libdeflate, which uses PCLMULQDQ/ARMv8 CRC instructions
// where the CPU has them: about 10x zlib's crc32 here, which made the zip CRC check the largest
// CPU cost of `libshard pack`.
#pragma once

#include <libdeflate.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace libshard::convert {

// CRC-32 of `b`, continuing from `crc` (0 to start).
inline uint32_t Crc32(std::span<const std::byte> b, uint32_t crc = 0) {
  return libdeflate_crc32(crc, b.data(), b.size());
}

}  // namespace libshard::convert
