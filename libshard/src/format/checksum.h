// xxh3-64 checksums (FORMAT.md §1, §3.6, §4.1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace libshard::format {

// XXH3-64, seed 0.
uint64_t Xxh3(const void* data, size_t size);
inline uint64_t Xxh3(std::span<const std::byte> bytes) { return Xxh3(bytes.data(), bytes.size()); }

// A field checksum (index version 3, §3.9): the low 32 bits of the xxh3-64 of the field's bytes.
inline uint64_t FieldChecksum(const void* data, size_t size) {
  return Xxh3(data, size) & 0xffffffffu;
}
inline constexpr uint8_t kFieldChecksumWidth = 4;  // bytes of a field checksum column

// xxh3 of `bytes` with the 8 bytes at `hole` taken as zero (index §3.6, shard header §4.1).
// Precondition: hole + 8 <= bytes.size().
uint64_t Xxh3WithHole(std::span<const std::byte> bytes, size_t hole);

}  // namespace libshard::format
