// Field codecs: FORMAT.md §4.3. The entry points; the codecs are in the codec table
// (codec_table.h, one file per codec) and the region's layout in the chunk walker
// (chunk_walker.{h,cc}).
#include "codec/field_codec.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "codec/chunk_walker.h"
#include "codec/codec_table.h"
#include "codec/plane_kernel_select.h"
#include "format/bytes.h"

namespace libshard::codec {

Result<FieldGeometry> GeometryOf(DType dtype, std::span<const uint64_t> shape, int32_t seq_dim) {
  if (seq_dim < -1 || (seq_dim >= 0 && static_cast<size_t>(seq_dim) >= shape.size()))
    return Status::InvalidArgument("seq_dim " + std::to_string(seq_dim) + " is out of range");
  FieldGeometry g;
  g.dtype = dtype;
  g.rows = 1;
  g.row_elems = 1;
  const size_t split = shape.empty() ? 0 : static_cast<size_t>(std::max(seq_dim, 0)) + 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    uint64_t* target = d < split ? &g.rows : &g.row_elems;
    if (!format::CheckedMul(*target, shape[d], target))
      return Status::InvalidArgument("tensor shape overflows");
  }
  uint64_t elements = 0, bytes = 0;
  if (!format::CheckedMul(g.rows, g.row_elems, &elements) ||
      !format::CheckedMul(elements, DTypeSize(dtype), &bytes))
    return Status::InvalidArgument("tensor shape overflows");
  return g;
}

uint64_t DecodedBytes(const FieldGeometry& g, uint64_t rows) {
  return std::min(rows, g.rows) * g.row_elems * DTypeSize(g.dtype);
}

Status Encode(CodecId id, const FieldGeometry& g, std::span<const std::byte> raw,
              const EncodeOptions& options, std::vector<std::byte>* out) {
  uint64_t elements = 0, bytes = 0;
  LIBSHARD_ASSIGN_OR_RETURN(const CodecEntry* codec, CheckGeometry(id, g, &elements, &bytes));
  if (bytes != raw.size())
    return Status::InvalidArgument("tensor holds " + std::to_string(raw.size()) +
                                   " bytes; its geometry says " + std::to_string(bytes));
  if (!codec->has_region) {
    out->insert(out->end(), raw.begin(), raw.end());
    return Status::OK();
  }
  if (elements == 0) return Status::OK();
  return EncodeRegion(*codec, g, reinterpret_cast<const uint8_t*>(raw.data()), options, out);
}

struct Decoder::State {
  DecodeScratch scratch;
  std::vector<std::byte> rows_scratch;  // DecodeRows: a chunk starting before the rows wanted
};

Decoder::Decoder() : state_(std::make_unique<State>()) {}
Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

Status Decoder::Decode(std::span<const std::byte> region, CodecId id, const FieldGeometry& g,
                       uint64_t max_rows, std::span<std::byte> dst) {
  if (const CodecEntry* codec = FindCodec(id); codec != nullptr && !codec->has_region) {
    uint64_t elements = 0, bytes = 0;
    LIBSHARD_RETURN_IF_ERROR(CheckGeometry(id, g, &elements, &bytes).status());
    const uint64_t want = DecodedBytes(g, max_rows);
    if (dst.size() != want)
      return Status::InvalidArgument("destination holds " + std::to_string(dst.size()) +
                                     " bytes; " + std::to_string(want) + " are decoded");
    if (region.size() != bytes)
      return Status::Corruption("raw region holds " + std::to_string(region.size()) +
                                " bytes; the dims say " + std::to_string(bytes));
    if (want > 0) std::memcpy(dst.data(), region.data(), want);
    return Status::OK();
  }
  // A kernel forced by LIBSHARD_PLANES_KERNEL that this CPU cannot run is an error here, before
  // any kernel runs (codec/plane_kernel_select.h).
  LIBSHARD_RETURN_IF_ERROR(ActivePlaneKernel().status());
  LIBSHARD_ASSIGN_OR_RETURN(RegionInfo info, ParseRegion(region, id, g));
  const CodecEntry& codec = *FindCodec(id);  // ParseRegion checked the id
  const uint64_t want = DecodedBytes(g, max_rows);
  if (dst.size() != want)
    return Status::InvalidArgument("destination holds " + std::to_string(dst.size()) +
                                   " bytes; " + std::to_string(want) + " are decoded");
  const size_t row_bytes = static_cast<size_t>(g.row_elems * DTypeSize(g.dtype));
  auto* out = reinterpret_cast<uint8_t*>(dst.data());
  DecodeScratch& s = state_->scratch;
  return ForEachChunk(region, codec, info, g, std::min(max_rows, g.rows),
                      [&](const ChunkView& c) {
                        return codec.decode_chunk(s, g, c, out + c.row0 * row_bytes);
                      });
}

Status Decoder::DecodeRows(std::span<const std::byte> head, uint64_t region_size,
                           std::span<const std::byte> body, uint64_t body_offset, CodecId id,
                           const FieldGeometry& g, uint64_t row_begin, uint64_t row_end,
                           std::span<std::byte> dst) {
  if (row_begin >= row_end || row_end > g.rows)
    return Status::InvalidArgument("rows [" + std::to_string(row_begin) + ", " +
                                   std::to_string(row_end) + ") are not rows of the " +
                                   std::to_string(g.rows) + " of the tensor");
  LIBSHARD_RETURN_IF_ERROR(ActivePlaneKernel().status());
  LIBSHARD_ASSIGN_OR_RETURN(RegionInfo info, ParseRegionHead(head, region_size, id, g));
  const CodecEntry& codec = *FindCodec(id);  // ParseRegionHead checked the id
  const uint64_t row_bytes = g.row_elems * DTypeSize(g.dtype);
  if (dst.size() != (row_end - row_begin) * row_bytes)
    return Status::InvalidArgument("destination holds " + std::to_string(dst.size()) +
                                   " bytes; " + std::to_string((row_end - row_begin) * row_bytes) +
                                   " are decoded");
  if (info.chunk_count == 0) return Status::OK();  // rows without elements: nothing to decode
  const std::vector<ChunkPlace> places = ChunkPlaces(head, info, g);
  const uint8_t* base = (info.flags & kFlagChannelBase)
                            ? reinterpret_cast<const uint8_t*>(head.data()) + info.chunks_offset -
                                  g.row_elems
                            : nullptr;
  const uint64_t fixed_row = codec.fixed_row_bytes(g);
  DecodeScratch& s = state_->scratch;
  auto* out = reinterpret_cast<uint8_t*>(dst.data());
  for (uint64_t c = row_begin / info.chunk_rows; c < info.chunk_count; ++c) {
    const uint64_t row0 = c * info.chunk_rows;
    if (row0 >= row_end) break;
    const ChunkPlace& place = places[c];
    if (place.offset < body_offset || place.offset - body_offset > body.size() ||
        place.size > body.size() - (place.offset - body_offset))
      return Status::InvalidArgument(ChunkContext(codec, c) + ": bytes [" +
                                     std::to_string(place.offset) + ", +" +
                                     std::to_string(place.size) + ") are not in the bytes read [" +
                                     std::to_string(body_offset) + ", +" +
                                     std::to_string(body.size()) + ")");
    ChunkView v;
    v.index = c;
    v.row0 = row0;
    v.rows = std::min<uint64_t>(info.chunk_rows, g.rows - row0);
    v.need = std::min<uint64_t>(v.rows, row_end - row0);
    v.n = static_cast<size_t>(v.rows * g.row_elems);
    v.mode = ChunkEntry::DecodeFrom(head.data() + kRegionHeaderSize + kChunkEntrySize * c).mode;
    v.fixed = body.data() + (place.offset - body_offset);
    v.coded = v.fixed + fixed_row * v.rows;
    v.coded_size = place.coded_size;
    v.base = base;
    Status st;
    if (row0 >= row_begin) {
      st = codec.decode_chunk(s, g, v, out + (row0 - row_begin) * row_bytes);
    } else {
      // The chunk starts before the rows wanted: its first v.need rows into a scratch of at most
      // one chunk (chunk_rows <= the tensor's rows, which the index's dims give), then the rows
      // from row_begin.
      std::vector<std::byte>& tmp = state_->rows_scratch;
      tmp.resize(static_cast<size_t>(v.need * row_bytes));
      st = codec.decode_chunk(s, g, v, reinterpret_cast<uint8_t*>(tmp.data()));
      if (st.ok()) {
        const uint64_t skip = row_begin - row0;
        std::memcpy(out, tmp.data() + skip * row_bytes, (v.need - skip) * row_bytes);
      }
    }
    if (!st.ok()) return st.WithContext(ChunkContext(codec, c));
  }
  return Status::OK();
}

Status Decoder::DecodeFp8(std::span<const std::byte> region, CodecId id, const FieldGeometry& g,
                          uint64_t max_rows, std::span<uint8_t> fp8_dst,
                          std::span<float> scales_dst) {
  const CodecEntry* codec = FindCodec(id);
  if (codec == nullptr || codec->decode_codes == nullptr)
    return Status::InvalidArgument("DecodeFp8 needs an fp8 codec");
  LIBSHARD_RETURN_IF_ERROR(ActivePlaneKernel().status());
  LIBSHARD_ASSIGN_OR_RETURN(RegionInfo info, ParseRegion(region, id, g));
  const uint64_t rows_wanted = std::min(max_rows, g.rows);
  if (fp8_dst.size() != rows_wanted * g.row_elems || scales_dst.size() != rows_wanted)
    return Status::InvalidArgument("fp8 destination must hold " +
                                   std::to_string(rows_wanted * g.row_elems) +
                                   " codes and " + std::to_string(rows_wanted) + " scales");
  if (info.chunk_count == 0) {
    std::fill(scales_dst.begin(), scales_dst.end(), 0.0f);  // rows of no elements
    return Status::OK();
  }
  DecodeScratch& s = state_->scratch;
  return ForEachChunk(region, *codec, info, g, rows_wanted, [&](const ChunkView& c) {
    return codec->decode_codes(s, g, c, fp8_dst.data() + c.row0 * g.row_elems,
                               scales_dst.data() + c.row0);
  });
}

}  // namespace libshard::codec
