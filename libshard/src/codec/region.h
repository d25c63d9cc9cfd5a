// The on-disk structs of a codec region (FORMAT.md §4.3.2): the 32-byte region header and the
// 8-byte chunk table entry, each with EncodeTo/DecodeFrom. Bytes only: DecodeFrom reads the
// fields as they are (reserved ones included); what they must say is checked by ParseRegion
// (codec/chunk_walker.cc), which knows the codec and the geometry.
#pragma once

#include <cstddef>
#include <cstdint>

namespace libshard::codec {

inline constexpr uint8_t kRegionMagic[4] = {0x4C, 0x53, 0x46, 0x43};  // "LSFC"

// Chunk modes (§4.3.2): how a chunk's coded plane is stored.
inline constexpr uint8_t kModeStored = 0;
inline constexpr uint8_t kModeZstd = 1;
inline constexpr uint8_t kModeHuffman = 2;

// Header flags: planes and fp8-entropy carry a channel base table after the chunk table.
inline constexpr uint8_t kFlagChannelBase = 1;

// Bytes 0-31 of a region: magic "LSFC", codec id, dtype, flags, a reserved byte, rows and
// row_elems (u64), chunk_rows and chunk_count (u32), little-endian.
struct RegionHeader {
  uint8_t codec = 0;
  uint8_t dtype = 0;
  uint8_t flags = 0;
  uint8_t reserved = 0;  // must be 0
  uint64_t rows = 0;
  uint64_t row_elems = 0;
  uint32_t chunk_rows = 0;
  uint32_t chunk_count = 0;

  // Writes the 32 bytes at dst (magic included).
  void EncodeTo(std::byte* dst) const;
  // Reads the 32 bytes at src into *out; false (and *out untouched) when the magic is not "LSFC".
  static bool DecodeFrom(const std::byte* src, RegionHeader* out);
};

// One chunk table entry: the coded plane's size (u32), its mode, three reserved bytes.
struct ChunkEntry {
  uint32_t coded_size = 0;
  uint8_t mode = kModeStored;
  uint32_t reserved = 0;  // bytes 5-7 as one value; must be 0

  void EncodeTo(std::byte* dst) const;  // 8 bytes at dst
  static ChunkEntry DecodeFrom(const std::byte* src);
};

}  // namespace libshard::codec
