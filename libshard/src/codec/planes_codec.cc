// Codec 2, planes (FORMAT.md §4.3.4): bfloat16/float16 split into planes, lossless. A chunk's
// fixed part is the low bytes; its coded plane is the high bytes (sign and exponent) less the
// channel base, entropy-coded (Huffman or zstd) or as they are.
#include "codec/codec_table.h"
#include "codec/plane_kernels.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace libshard::codec {
namespace {

// Channel base: the rounded mean over the rows of each channel's exponent bits (hi & 0x7F), and
// bit 7 set when most of the channel's values are negative.
Status Prepare(EncodeJob& job) {
  if (!job.channel_base) return Status::OK();
  const FieldGeometry& g = job.g;
  std::vector<uint64_t> sums(g.row_elems, 0), negatives(g.row_elems, 0);
  for (uint64_t r = 0; r < g.rows; ++r) {
    const uint8_t* row = job.src + r * g.row_elems * 2;
    for (uint64_t c = 0; c < g.row_elems; ++c) {
      sums[c] += row[2 * c + 1] & 0x7F;
      negatives[c] += row[2 * c + 1] >> 7;
    }
  }
  job.base.resize(g.row_elems);
  for (uint64_t c = 0; c < g.row_elems; ++c)
    job.base[c] = static_cast<uint8_t>((sums[c] + g.rows / 2) / g.rows |
                                       (2 * negatives[c] > g.rows ? 0x80 : 0));
  return Status::OK();
}

Result<ChunkEntry> EncodeChunk(EncodeJob& job, const ChunkRows& c, std::vector<std::byte>* out) {
  // Locals, not members: the byte stores below may alias them, which would reload them.
  const size_t n = c.n, rows = c.rows, row_elems = job.g.row_elems;
  const uint8_t* chunk = job.src + c.row0 * row_elems * 2;
  job.scratch.a.resize(n * 2);
  uint8_t* lo = reinterpret_cast<uint8_t*>(job.scratch.a.data());
  uint8_t* hi = lo + n;
  for (size_t i = 0; i < n; ++i) {
    lo[i] = chunk[2 * i];
    hi[i] = chunk[2 * i + 1];
  }
  if (job.channel_base) {
    const uint8_t* base = job.base.data();
    for (size_t r = 0; r < rows; ++r)
      for (size_t k = 0; k < row_elems; ++k)
        hi[r * row_elems + k] = RemoveBase(hi[r * row_elems + k], base[k], false);
  }
  out->insert(out->end(), job.scratch.a.data(), job.scratch.a.data() + n);
  const size_t coded_start = out->size();
  LIBSHARD_ASSIGN_OR_RETURN(uint8_t mode,
                            AppendCoded(job.scratch.cctx.get(), job.options.entropy,
                                        job.options.level, job.scratch.a.data() + n, n, true,
                                        out));
  return ChunkEntry{.coded_size = static_cast<uint32_t>(out->size() - coded_start), .mode = mode};
}

Status DecodeChunk(DecodeScratch& s, const FieldGeometry& g, const ChunkView& c,
                   uint8_t* chunk_out) {
  const auto* lo = reinterpret_cast<const uint8_t*>(c.fixed);
  LIBSHARD_ASSIGN_OR_RETURN(const uint8_t* hi, s.BytePlane(c));
  Interleave(lo, hi, c.base, g.row_elems, static_cast<size_t>(c.need * g.row_elems), chunk_out);
#if defined(__SSE2__)
  _mm_sfence();  // the non-temporal stores of InterleaveRun, before anyone reads dst
#endif
  return Status::OK();
}

}  // namespace

const CodecEntry kPlanesCodec = {
    .id = CodecId::kPlanes,
    .name = "planes",
    .lossy = false,
    .has_region = true,
    .flags = kFlagChannelBase,
    .coded_modes = (1 << kModeZstd) | (1 << kModeHuffman),
    .accepts = AcceptsHalf,
    .coded_row_bytes = RowElemBytes,
    .fixed_row_bytes = RowElemBytes,
    .prepare = Prepare,
    .encode_chunk = EncodeChunk,
    .decode_chunk = DecodeChunk,
};

}  // namespace libshard::codec
