// Codec 3, fp8 (FORMAT.md §4.3.5): bfloat16/float16 quantized to float8_e4m3fn with one float32
// scale per row; lossy. A chunk's fixed part is its rows' scales, its coded plane the codes as
// they are. The chunk functions here serve fp8-entropy (codec 4) too, which also codes the plane
// and may subtract a channel base.
#include <bit>
#include <cstring>

#include "codec/codec_table.h"
#include "codec/plane_kernels.h"
#include "format/bytes.h"

namespace libshard::codec {
namespace {

uint64_t ScaleBytes(const FieldGeometry& g) { return kFp8ScaleBytes; }
float LoadF32(const std::byte* p) { return std::bit_cast<float>(format::GetU32(p)); }

Result<ChunkEntry> EncodeChunk(EncodeJob& job, const ChunkRows& c, std::vector<std::byte>* out) {
  return EncodeFp8Chunk(job, c, /*coded=*/false, out);
}

}  // namespace

// Every row's scale and codes first (§4.3.5), so that fp8-entropy's channel base sees them all.
Status PrepareFp8(EncodeJob& job) {
  job.scales.resize(job.g.rows);
  job.scratch.b.resize(job.g.elements());
  QuantizeRows(job.src, job.g, job.scales.data(),
               reinterpret_cast<uint8_t*>(job.scratch.b.data()));
  job.codes = reinterpret_cast<const uint8_t*>(job.scratch.b.data());
  return Status::OK();
}

Result<ChunkEntry> EncodeFp8Chunk(EncodeJob& job, const ChunkRows& c, bool coded,
                                  std::vector<std::byte>* out) {
  // Locals, not members: the byte stores below may alias them, which would reload them.
  const size_t n = c.n, rows = c.rows, row_elems = job.g.row_elems;
  const size_t scales_at = out->size();
  out->resize(scales_at + kFp8ScaleBytes * rows);
  for (size_t r = 0; r < rows; ++r)
    format::PutU32(out->data() + scales_at + kFp8ScaleBytes * r,
                   std::bit_cast<uint32_t>(job.scales[c.row0 + r]));
  job.scratch.a.resize(n);
  auto* a = reinterpret_cast<uint8_t*>(job.scratch.a.data());
  std::memcpy(a, job.codes + c.row0 * row_elems, n);
  if (job.channel_base) {
    const uint8_t* base = job.base.data();
    for (size_t r = 0; r < rows; ++r)
      for (size_t k = 0; k < row_elems; ++k)
        a[r * row_elems + k] = RemoveBase(a[r * row_elems + k], base[k], true);
  }
  const size_t coded_start = out->size();
  LIBSHARD_ASSIGN_OR_RETURN(uint8_t mode,
                            AppendCoded(job.scratch.cctx.get(), job.options.fp8_entropy,
                                        job.options.level, job.scratch.a.data(), n, coded,
                                        out));
  return ChunkEntry{.coded_size = static_cast<uint32_t>(out->size() - coded_start), .mode = mode};
}

Status DecodeFp8Chunk(DecodeScratch& s, const FieldGeometry& g, const ChunkView& c,
                      uint8_t* chunk_out) {
  LIBSHARD_ASSIGN_OR_RETURN(const uint8_t* q, s.BytePlane(c));
  for (uint64_t r = 0; r < c.need; ++r)
    DequantizeRow(q + r * g.row_elems, c.base, g.row_elems,
                  LoadF32(c.fixed + kFp8ScaleBytes * r), g.dtype,
                  chunk_out + 2 * r * g.row_elems);
  return Status::OK();
}

Status DecodeFp8CodesChunk(DecodeScratch& s, const FieldGeometry& g, const ChunkView& c,
                           uint8_t* q_out, float* scales_out) {
  for (uint64_t r = 0; r < c.need; ++r) scales_out[r] = LoadF32(c.fixed + kFp8ScaleBytes * r);
  const size_t n_need = static_cast<size_t>(c.need * g.row_elems);
  if (c.mode != kModeStored) {
    std::byte* tmp = c.need == c.rows ? reinterpret_cast<std::byte*>(q_out) : s.Scratch(c.n);
    LIBSHARD_RETURN_IF_ERROR(s.Unpack(c.mode, c.coded, c.coded_size, tmp, c.n));
    if (c.need != c.rows) std::memcpy(q_out, tmp, n_need);
  } else {
    std::memcpy(q_out, c.coded, n_need);
  }
  if (c.base != nullptr)
    for (uint64_t r = 0; r < c.need; ++r)
      ApplyBase(q_out + r * g.row_elems, c.base, g.row_elems, true);
  return Status::OK();
}

const CodecEntry kFp8Codec = {
    .id = CodecId::kFp8,
    .name = "fp8",
    .lossy = true,
    .has_region = true,
    .flags = 0,
    .coded_modes = 0,  // the codes are stored as they are
    .accepts = AcceptsHalf,
    .coded_row_bytes = RowElemBytes,
    .fixed_row_bytes = ScaleBytes,
    .prepare = PrepareFp8,
    .encode_chunk = EncodeChunk,
    .decode_chunk = DecodeFp8Chunk,
    .decode_codes = DecodeFp8CodesChunk,
};

}  // namespace libshard::codec
