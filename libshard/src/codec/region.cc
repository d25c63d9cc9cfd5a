// The codec region's on-disk structs: FORMAT.md §4.3.2.
#include "codec/region.h"

#include "codec/field_codec.h"
#include "format/bytes.h"

namespace libshard::codec {
namespace {
uint8_t U8(std::byte b) { return std::to_integer<uint8_t>(b); }
}  // namespace

static_assert(kRegionHeaderSize == 32 && kChunkEntrySize == 8);

void RegionHeader::EncodeTo(std::byte* h) const {
  for (int k = 0; k < 4; ++k) h[k] = std::byte{kRegionMagic[k]};
  h[4] = std::byte{codec};
  h[5] = std::byte{dtype};
  h[6] = std::byte{flags};
  h[7] = std::byte{reserved};
  format::PutU64(h + 8, rows);
  format::PutU64(h + 16, row_elems);
  format::PutU32(h + 24, chunk_rows);
  format::PutU32(h + 28, chunk_count);
}

bool RegionHeader::DecodeFrom(const std::byte* h, RegionHeader* out) {
  for (int k = 0; k < 4; ++k)
    if (U8(h[k]) != kRegionMagic[k]) return false;
  out->codec = U8(h[4]);
  out->dtype = U8(h[5]);
  out->flags = U8(h[6]);
  out->reserved = U8(h[7]);
  out->rows = format::GetU64(h + 8);
  out->row_elems = format::GetU64(h + 16);
  out->chunk_rows = format::GetU32(h + 24);
  out->chunk_count = format::GetU32(h + 28);
  return true;
}

void ChunkEntry::EncodeTo(std::byte* e) const {
  format::PutU32(e, coded_size);
  e[4] = std::byte{mode};
  e[5] = std::byte{static_cast<uint8_t>(reserved)};
  e[6] = std::byte{static_cast<uint8_t>(reserved >> 8)};
  e[7] = std::byte{static_cast<uint8_t>(reserved >> 16)};
}

ChunkEntry ChunkEntry::DecodeFrom(const std::byte* e) {
  ChunkEntry c;
  c.coded_size = format::GetU32(e);
  c.mode = U8(e[4]);
  c.reserved = uint32_t{U8(e[5])} | uint32_t{U8(e[6])} << 8 | uint32_t{U8(e[7])} << 16;
  return c;
}

}  // namespace libshard::codec
