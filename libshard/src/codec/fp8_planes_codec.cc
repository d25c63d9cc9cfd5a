// Codec 6, fp8-planes (FORMAT.md §4.3.8): codec 3's float8_e4m3fn codes and row scales (the same
// quantization, so the same decoded values), split: a chunk's fixed part is its rows' float32
// scales and then a nibble row per row (each code's sign and 3 mantissa bits), its coded plane the
// codes' 4 exponent bits less the channel base, mod 16, entropy-coded (Huffman or zstd) or as they
// are. Against codec 4 (fp8_entropy_codec.cc), which zstd-codes whole code bytes, the near-random
// sign and mantissa bits cost a stored bit each, and the Huffman decoder yields several of the
// ~2-bit exponent symbols per table lookup.
#include <bit>
#include <cstring>

#include "codec/codec_table.h"
#include "codec/plane_kernels.h"
#include "format/bytes.h"

namespace libshard::codec {
namespace {

float LoadF32(const std::byte* p) { return std::bit_cast<float>(format::GetU32(p)); }

uint64_t FixedRowBytes(const FieldGeometry& g) {
  return kFp8ScaleBytes + NibbleRowBytes(g.row_elems);
}

// The codes of every row (as codec 3), then the channel base: the rounded mean over the rows of
// each channel's exponent field (code >> 3 & 0x0F); bits 4-7 stay 0.
Status Prepare(EncodeJob& job) {
  LIBSHARD_RETURN_IF_ERROR(PrepareFp8(job));
  if (!job.channel_base) return Status::OK();
  const FieldGeometry& g = job.g;
  std::vector<uint64_t> sums(g.row_elems, 0);
  for (uint64_t r = 0; r < g.rows; ++r) {
    const uint8_t* row = job.codes + r * g.row_elems;
    for (uint64_t c = 0; c < g.row_elems; ++c) sums[c] += (row[c] >> 3) & 0x0F;
  }
  job.base.resize(g.row_elems);
  for (uint64_t c = 0; c < g.row_elems; ++c)
    job.base[c] = static_cast<uint8_t>((sums[c] + g.rows / 2) / g.rows);
  return Status::OK();
}

Result<ChunkEntry> EncodeChunk(EncodeJob& job, const ChunkRows& c, std::vector<std::byte>* out) {
  // Locals, not members: the byte stores below may alias them, which would reload them.
  const size_t n = c.n, rows = c.rows, row_elems = job.g.row_elems;
  const size_t nib_row = NibbleRowBytes(row_elems);
  const size_t fixed = kFp8ScaleBytes * rows + nib_row * rows;
  job.scratch.a.resize(fixed + n);
  std::byte* a = job.scratch.a.data();
  for (size_t r = 0; r < rows; ++r)
    format::PutU32(a + kFp8ScaleBytes * r, std::bit_cast<uint32_t>(job.scales[c.row0 + r]));
  auto* nibbles = reinterpret_cast<uint8_t*>(a) + kFp8ScaleBytes * rows;
  auto* plane = reinterpret_cast<uint8_t*>(a) + fixed;
  const uint8_t* base = job.channel_base ? job.base.data() : nullptr;
  const uint8_t* codes = job.codes + c.row0 * row_elems;
  for (size_t r = 0; r < rows; ++r)
    SplitFp8Planes(codes + r * row_elems, base, row_elems, nibbles + r * nib_row,
                   plane + r * row_elems);
  out->insert(out->end(), a, a + fixed);
  const size_t coded_start = out->size();
  LIBSHARD_ASSIGN_OR_RETURN(uint8_t mode,
                            AppendCoded(job.scratch.cctx.get(), job.options.entropy,
                                        job.options.level, a + fixed, n, true, out));
  return ChunkEntry{.coded_size = static_cast<uint32_t>(out->size() - coded_start), .mode = mode};
}

Status DecodeChunk(DecodeScratch& s, const FieldGeometry& g, const ChunkView& c,
                   uint8_t* chunk_out) {
  const auto* nibbles = reinterpret_cast<const uint8_t*>(c.fixed) + kFp8ScaleBytes * c.rows;
  const size_t row_elems = static_cast<size_t>(g.row_elems), nib_row = NibbleRowBytes(row_elems);
  LIBSHARD_ASSIGN_OR_RETURN(const uint8_t* plane, s.BytePlane(c));
  for (uint64_t r = 0; r < c.need; ++r)
    DequantizeFp8PlanesRow(nibbles + r * nib_row, plane + r * row_elems, c.base, row_elems,
                           LoadF32(c.fixed + kFp8ScaleBytes * r), g.dtype,
                           chunk_out + 2 * r * row_elems);
  return Status::OK();
}

// Decoder::DecodeFp8: the first c.need rows' scales and codes, not dequantized.
Status DecodeCodesChunk(DecodeScratch& s, const FieldGeometry& g, const ChunkView& c,
                        uint8_t* q_out, float* scales_out) {
  const auto* nibbles = reinterpret_cast<const uint8_t*>(c.fixed) + kFp8ScaleBytes * c.rows;
  const size_t row_elems = static_cast<size_t>(g.row_elems), nib_row = NibbleRowBytes(row_elems);
  for (uint64_t r = 0; r < c.need; ++r) scales_out[r] = LoadF32(c.fixed + kFp8ScaleBytes * r);
  LIBSHARD_ASSIGN_OR_RETURN(const uint8_t* plane, s.BytePlane(c));
  for (uint64_t r = 0; r < c.need; ++r)
    Fp8PlanesCodes(nibbles + r * nib_row, plane + r * row_elems, c.base, row_elems,
                   q_out + r * row_elems);
  return Status::OK();
}

}  // namespace

const CodecEntry kFp8PlanesCodec = {
    .id = CodecId::kFp8Planes,
    .name = "fp8-planes",
    .lossy = true,
    .has_region = true,
    .flags = kFlagChannelBase,
    .coded_modes = (1 << kModeZstd) | (1 << kModeHuffman),
    .accepts = AcceptsHalf,
    .coded_row_bytes = RowElemBytes,
    .fixed_row_bytes = FixedRowBytes,
    .prepare = Prepare,
    .encode_chunk = EncodeChunk,
    .decode_chunk = DecodeChunk,
    .decode_codes = DecodeCodesChunk,
};

}  // namespace libshard::codec
