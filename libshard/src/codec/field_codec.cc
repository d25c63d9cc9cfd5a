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
