// Helpers shared by index_encode.cc, index_parse.cc and index_block.cc (the index of
// format/index.h): little-endian integers of 1 to 8 bytes (§3.8.6) and the message suffix.
// Private to format/.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

#include "format/bytes.h"
#include "format/index.h"

namespace libshard::format::index_internal {

inline constexpr const char* kDamaged = "; the index is damaged, re-run libshard pack";
// The largest field codec id of FORMAT.md §4.3.1: codec::kMaxCodecId, which format/ cannot include
// (it depends on nothing); codec_test checks that the two agree.
inline constexpr uint16_t kMaxKnownCodec = 6;

// Bytes needed for v (0 for 0).
inline uint8_t WidthOf(uint64_t v) { return static_cast<uint8_t>((std::bit_width(v) + 7) / 8); }

inline uint64_t GetUN(const std::byte* p, uint8_t width) {
  uint64_t v = 0;
  for (uint8_t k = 0; k < width; ++k) v |= uint64_t{std::to_integer<uint8_t>(p[k])} << (8 * k);
  return v;
}

inline void PutUN(std::string* out, uint64_t v, uint8_t width) {
  for (uint8_t k = 0; k < width; ++k) out->push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}

inline uint64_t Align8(uint64_t x) { return AlignUp(x, 8); }

// A sample's stored region size for field f (0 when the writer gave none).
inline uint64_t StoredSize(const IndexSample& s, size_t f) {
  return f < s.field_stored_sizes.size() ? s.field_stored_sizes[f] : 0;
}

}  // namespace libshard::format::index_internal
