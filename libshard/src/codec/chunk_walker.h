// The chunk walker (FORMAT.md §4.3.2), one for every codec: the region header, the chunk table,
// the channel base table and the chunks' bounds are written, checked and walked here, and their
// error messages made here; a codec (codec_table.h) only encodes and decodes one chunk.
// Internal to codec/.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/codec_table.h"
#include "codec/field_codec.h"
#include "codec/region.h"
#include "libshard/status.h"

namespace libshard::codec {

// The codec of `id` after checking that it exists, takes g.dtype and that g's element count and
// byte size fit a u64 (InvalidArgument otherwise); sets *elements and *bytes.
Result<const CodecEntry*> CheckGeometry(CodecId id, const FieldGeometry& g, uint64_t* elements,
                                        uint64_t* bytes);

// Appends the region of a tensor with elements (`src`, g.elements() elements) under `codec`
// (one with a region): header, chunk table, channel base table, chunks.
Status EncodeRegion(const CodecEntry& codec, const FieldGeometry& g, const uint8_t* src,
                    const EncodeOptions& options, std::vector<std::byte>* out);

// "codec region (NAME)" and "codec region (NAME): chunk C", the prefix of the walker's errors.
std::string RegionContext(const CodecEntry& codec);
std::string ChunkContext(const CodecEntry& codec, uint64_t chunk);

// Calls fn(const ChunkView&) -> Status for each chunk that covers the first `rows_wanted`
// (<= g.rows) rows of `region`, which ParseRegion checked into `info`, in order; returns the first
// error with the chunk named. Every pointer in a view lies within the region (ParseRegion checked
// that the chunks tile it exactly).
template <typename Fn>
Status ForEachChunk(std::span<const std::byte> region, const CodecEntry& codec,
                    const RegionInfo& info, const FieldGeometry& g, uint64_t rows_wanted, Fn&& fn) {
  if (info.chunk_count == 0) return Status::OK();  // no elements
  const uint64_t fixed_row = codec.fixed_row_bytes(g);
  const uint8_t* base = (info.flags & kFlagChannelBase)
                            ? reinterpret_cast<const uint8_t*>(region.data()) +
                                  info.chunks_offset - g.row_elems
                            : nullptr;
  const std::byte* p = region.data() + info.chunks_offset;
  for (uint64_t c = 0, row0 = 0; row0 < rows_wanted; ++c, row0 += info.chunk_rows) {
    const ChunkEntry e =
        ChunkEntry::DecodeFrom(region.data() + kRegionHeaderSize + kChunkEntrySize * c);
    ChunkView v;
    v.index = c;
    v.row0 = row0;
    v.rows = std::min<uint64_t>(info.chunk_rows, g.rows - row0);
    v.need = std::min<uint64_t>(v.rows, rows_wanted - row0);
    v.n = static_cast<size_t>(v.rows * g.row_elems);
    v.mode = e.mode;
    v.fixed = p;
    v.coded = p + fixed_row * v.rows;
    v.coded_size = e.coded_size;
    v.base = base;
    if (Status st = fn(v); !st.ok()) return st.WithContext(ChunkContext(codec, c));
    p = v.coded + e.coded_size;
  }
  return Status::OK();
}

}  // namespace libshard::codec
