// The chunk walker: FORMAT.md §4.3.2 for every codec.
#include "codec/chunk_walker.h"

#include <algorithm>
#include <limits>
#include <string>

#include "format/bytes.h"

namespace libshard::codec {
namespace {

using format::CheckedAdd;
using format::CheckedMul;

// Below this many elements per row the channel base table costs more than it saves.
constexpr uint64_t kMinChannelBaseElems = 64;

EncoderScratch& ThreadEncoderScratch() {
  thread_local EncoderScratch s;
  return s;
}

std::string ChunkName(uint64_t c) { return "chunk " + std::to_string(c); }

}  // namespace

Result<const CodecEntry*> CheckGeometry(CodecId id, const FieldGeometry& g, uint64_t* elements,
                                        uint64_t* bytes) {
  const CodecEntry* codec = FindCodec(id);
  if (codec == nullptr)
    return Status::InvalidArgument("unknown codec id " + std::to_string(static_cast<int>(id)));
  if (!CodecAccepts(id, g.dtype))
    return Status::InvalidArgument(std::string("codec ") + std::string(codec->name) +
                                   " cannot store a tensor of dtype " +
                                   std::string(DTypeName(g.dtype)));
  if (!CheckedMul(g.rows, g.row_elems, elements) ||
      !CheckedMul(*elements, DTypeSize(g.dtype), bytes))
    return Status::InvalidArgument("tensor geometry overflows (" + std::to_string(g.rows) +
                                   " rows of " + std::to_string(g.row_elems) + " elements)");
  return codec;
}

std::string RegionContext(const CodecEntry& codec) {
  return "codec region (" + std::string(codec.name) + ")";
}
std::string ChunkContext(const CodecEntry& codec, uint64_t chunk) {
  return RegionContext(codec) + ": " + ChunkName(chunk);
}

Status EncodeRegion(const CodecEntry& codec, const FieldGeometry& g, const uint8_t* src,
                    const EncodeOptions& options, std::vector<std::byte>* out) {
  const uint64_t coded_row = codec.coded_row_bytes(g);
  if (coded_row > kMaxChunkPlaneBytes)
    return Status::InvalidArgument("a row of " + std::to_string(coded_row) +
                                   " bytes exceeds the largest chunk plane (2^31 - 1 bytes); "
                                   "store this field raw");
  uint64_t chunk_rows = options.chunk_rows > 0
                            ? options.chunk_rows
                            : std::max<uint64_t>(1, options.chunk_elems / g.row_elems);
  chunk_rows = std::min({chunk_rows, kMaxChunkPlaneBytes / coded_row, g.rows,
                         uint64_t{std::numeric_limits<uint32_t>::max()}});
  const uint64_t chunk_count = (g.rows + chunk_rows - 1) / chunk_rows;
  if (chunk_count > std::numeric_limits<uint32_t>::max())
    return Status::InvalidArgument("tensor needs more than 2^32 - 1 chunks");
  const bool channel_base = (codec.flags & kFlagChannelBase) && options.channel_base &&
                            g.row_elems >= kMinChannelBaseElems;

  const size_t region_start = out->size();
  out->resize(region_start + kRegionHeaderSize + kChunkEntrySize * chunk_count);
  RegionHeader header;
  header.codec = static_cast<uint8_t>(codec.id);
  header.dtype = static_cast<uint8_t>(g.dtype);
  header.flags = channel_base ? kFlagChannelBase : 0;
  header.rows = g.rows;
  header.row_elems = g.row_elems;
  header.chunk_rows = static_cast<uint32_t>(chunk_rows);
  header.chunk_count = static_cast<uint32_t>(chunk_count);
  header.EncodeTo(out->data() + region_start);

  EncoderScratch& s = ThreadEncoderScratch();
  if (!s.cctx) return Status::ResourceExhausted("cannot create a zstd compression context");
  EncodeJob job{.g = g, .options = options, .src = src, .scratch = s,
                .channel_base = channel_base, .base = {}, .scales = {}, .codes = nullptr};
  if (codec.prepare != nullptr) LIBSHARD_RETURN_IF_ERROR(codec.prepare(job));
  if (channel_base) {
    const auto* b = reinterpret_cast<const std::byte*>(job.base.data());
    out->insert(out->end(), b, b + job.base.size());
  }
  for (uint64_t c = 0; c < chunk_count; ++c) {
    ChunkRows rows;
    rows.index = c;
    rows.row0 = c * chunk_rows;
    rows.rows = std::min(chunk_rows, g.rows - rows.row0);
    rows.n = static_cast<size_t>(rows.rows * g.row_elems);
    LIBSHARD_ASSIGN_OR_RETURN(ChunkEntry entry, codec.encode_chunk(job, rows, out));
    entry.EncodeTo(out->data() + region_start + kRegionHeaderSize + kChunkEntrySize * c);
  }
  return Status::OK();
}

Result<RegionInfo> ParseRegion(std::span<const std::byte> region, CodecId id,
                               const FieldGeometry& g) {
  return ParseRegionHead(region, region.size(), id, g);
}

Result<RegionInfo> ParseRegionHead(std::span<const std::byte> region, uint64_t region_size,
                                   CodecId id, const FieldGeometry& g) {
  uint64_t elements = 0, bytes = 0;
  LIBSHARD_ASSIGN_OR_RETURN(const CodecEntry* codec, CheckGeometry(id, g, &elements, &bytes));
  if (!codec->has_region) return Status::InvalidArgument("a raw field has no codec region");
  if (region.size() > region_size)
    return Status::InvalidArgument("region head of " + std::to_string(region.size()) +
                                   " bytes is larger than its region of " +
                                   std::to_string(region_size));
  RegionInfo info;
  info.codec = id;
  if (elements == 0) {
    if (region_size != 0)
      return Status::Corruption("codec region of a tensor without elements holds " +
                                std::to_string(region_size) + " bytes; it must be empty");
    return info;
  }
  const std::string what = RegionContext(*codec);
  if (region_size < kRegionHeaderSize)
    return Status::Corruption(what + " of " + std::to_string(region_size) +
                              " bytes is shorter than its 32-byte header");
  if (region.size() < kRegionHeaderSize)
    return Status::InvalidArgument(what + ": the head read holds " +
                                   std::to_string(region.size()) + " bytes, not its header");
  RegionHeader h;
  if (!RegionHeader::DecodeFrom(region.data(), &h))
    return Status::Corruption(what + ": bad magic (not \"LSFC\")");
  if (h.codec != static_cast<uint8_t>(id))
    return Status::Corruption(what + ": header names codec " + std::to_string(h.codec) +
                              " but the index says " + std::to_string(static_cast<int>(id)));
  if (h.dtype != static_cast<uint32_t>(g.dtype))
    return Status::Corruption(what + ": header names dtype " + std::to_string(h.dtype) +
                              " but the field's dtype is " +
                              std::to_string(static_cast<uint32_t>(g.dtype)));
  if ((h.flags & ~codec->flags) != 0 || h.reserved != 0)
    return Status::Corruption(what + ": reserved header bits are set");
  info.flags = h.flags;
  if (h.rows != g.rows || h.row_elems != g.row_elems)
    return Status::Corruption(what + ": header says " + std::to_string(h.rows) + " rows of " +
                              std::to_string(h.row_elems) + " elements; the index's dims say " +
                              std::to_string(g.rows) + " of " + std::to_string(g.row_elems));
  info.chunk_rows = h.chunk_rows;
  info.chunk_count = h.chunk_count;
  const uint64_t rows = h.rows, row_elems = h.row_elems;
  const uint64_t coded_row = codec->coded_row_bytes(g), fixed_row = codec->fixed_row_bytes(g);
  uint64_t chunk_plane = 0;
  if (info.chunk_rows == 0 || info.chunk_rows > rows ||
      !CheckedMul(coded_row, info.chunk_rows, &chunk_plane) || chunk_plane > kMaxChunkPlaneBytes)
    return Status::Corruption(what + ": chunk_rows " + std::to_string(info.chunk_rows) +
                              " is out of range");
  if (info.chunk_count != (rows + info.chunk_rows - 1) / info.chunk_rows)
    return Status::Corruption(what + ": chunk_count " + std::to_string(info.chunk_count) +
                              " does not cover " + std::to_string(rows) + " rows");
  uint64_t table_end = kRegionHeaderSize + uint64_t{kChunkEntrySize} * info.chunk_count;
  if (info.flags & kFlagChannelBase) {
    if (!CheckedAdd(table_end, row_elems, &table_end))
      return Status::Corruption(what + ": channel base table overflows");
  }
  if (table_end > region_size)
    return Status::Corruption(what + ": chunk table ends at byte " + std::to_string(table_end) +
                              ", past the region's " + std::to_string(region_size) + " bytes");
  if (table_end > region.size())
    return Status::InvalidArgument(what + ": the head read holds " +
                                   std::to_string(region.size()) + " bytes; its tables end at " +
                                   std::to_string(table_end));
  uint64_t total = table_end;
  for (uint64_t c = 0; c < info.chunk_count; ++c) {
    const ChunkEntry e =
        ChunkEntry::DecodeFrom(region.data() + kRegionHeaderSize + kChunkEntrySize * c);
    if (e.reserved != 0)
      return Status::Corruption(what + ": " + ChunkName(c) + ": reserved bytes are set");
    const uint64_t coded = e.coded_size;
    const uint64_t rc = std::min<uint64_t>(info.chunk_rows, rows - c * info.chunk_rows);
    const uint64_t plane = rc * coded_row;
    if (e.mode == kModeStored) {
      if (coded != plane)
        return Status::Corruption(what + ": " + ChunkName(c) + ": stored plane of " +
                                  std::to_string(coded) + " bytes; expected " +
                                  std::to_string(plane));
    } else if (e.mode < 8 && (codec->coded_modes & (1u << e.mode)) != 0) {
      if (coded == 0 || coded >= plane)
        return Status::Corruption(what + ": " + ChunkName(c) + ": coded plane of " +
                                  std::to_string(coded) + " bytes is not smaller than the " +
                                  std::to_string(plane) + " it decodes to");
    } else {
      return Status::Corruption(what + ": " + ChunkName(c) + ": unknown mode " +
                                std::to_string(e.mode));
    }
    if (!CheckedAdd(total, rc * fixed_row + coded, &total))
      return Status::Corruption(what + ": chunk sizes overflow");
  }
  if (total != region_size)
    return Status::Corruption(what + ": chunks end at byte " + std::to_string(total) +
                              " but the region holds " + std::to_string(region_size));
  info.chunks_offset = static_cast<size_t>(table_end);
  return info;
}

std::vector<ChunkPlace> ChunkPlaces(std::span<const std::byte> head, const RegionInfo& info,
                                    const FieldGeometry& g) {
  std::vector<ChunkPlace> out(info.chunk_count);
  if (info.chunk_count == 0) return out;
  const uint64_t fixed_row = FindCodec(info.codec)->fixed_row_bytes(g);
  uint64_t pos = info.chunks_offset;
  for (uint64_t c = 0; c < info.chunk_count; ++c) {
    const ChunkEntry e =
        ChunkEntry::DecodeFrom(head.data() + kRegionHeaderSize + kChunkEntrySize * c);
    const uint64_t rc = std::min<uint64_t>(info.chunk_rows, g.rows - c * info.chunk_rows);
    out[c].offset = pos;
    out[c].size = rc * fixed_row + e.coded_size;  // ParseRegionHead checked the sum
    out[c].coded_size = e.coded_size;
    pos += out[c].size;
  }
  return out;
}

uint64_t FixedRowBytes(CodecId id, const FieldGeometry& g) {
  const CodecEntry* codec = FindCodec(id);
  return codec == nullptr ? 0 : codec->fixed_row_bytes(g);
}

bool MayHaveChannelBase(CodecId id) {
  const CodecEntry* codec = FindCodec(id);
  return codec != nullptr && (codec->flags & kFlagChannelBase) != 0;
}

}  // namespace libshard::codec
