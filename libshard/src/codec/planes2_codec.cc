// Codec 5, planes2 (FORMAT.md §4.3.7): bfloat16/float16 split into planes, lossless. A chunk's
// fixed part is the low bytes and a sign bitmap per row; its coded plane is the 7 exponent bits
// (hi & 0x7F) less the channel base, mod 128, entropy-coded (Huffman or zstd) or as they are.
// Against codec 2 (planes_codec.cc) the signs, close to random in hidden states, cost a stored
// bit each instead of a coded one, and the plane's lower entropy lets the Huffman decoder yield
// more symbols per table lookup.
#include "codec/codec_table.h"
#include "codec/plane_kernels.h"


#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace libshard::codec {
namespace {

uint64_t FixedRowBytes(const FieldGeometry& g) { return g.row_elems + SignRowBytes(g.row_elems); }

// Channel base: the rounded mean over the rows of each channel's exponent bits (hi & 0x7F);
// bit 7 stays 0 (readers ignore it, §4.3.7).
Status Prepare(EncodeJob& job) {
  if (!job.channel_base) return Status::OK();
  const FieldGeometry& g = job.g;
  std::vector<uint64_t> sums(g.row_elems, 0);
  for (uint64_t r = 0; r < g.rows; ++r) {
    const uint8_t* row = job.src + r * g.row_elems * 2;
    for (uint64_t c = 0; c < g.row_elems; ++c) sums[c] += row[2 * c + 1] & 0x7F;
  }
  job.base.resize(g.row_elems);
  for (uint64_t c = 0; c < g.row_elems; ++c)
    job.base[c] = static_cast<uint8_t>((sums[c] + g.rows / 2) / g.rows);
  return Status::OK();
}

Result<ChunkEntry> EncodeChunk(EncodeJob& job, const ChunkRows& c, std::vector<std::byte>* out) {
  // Locals, not members: the byte stores below may alias them, which would reload them.
  const size_t n = c.n, rows = c.rows, row_elems = job.g.row_elems;
  const size_t sign_row = SignRowBytes(row_elems), fixed = n + rows * sign_row;
  const uint8_t* chunk = job.src + c.row0 * row_elems * 2;
  job.scratch.a.assign(fixed + n, std::byte{0});  // the bitmaps' pad bits stay 0
  uint8_t* lo = reinterpret_cast<uint8_t*>(job.scratch.a.data());
  uint8_t* signs = lo + n;
  uint8_t* plane = lo + fixed;
  const uint8_t* base = job.channel_base ? job.base.data() : nullptr;
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* src = chunk + 2 * r * row_elems;
    uint8_t* row_lo = lo + r * row_elems;
    uint8_t* row_plane = plane + r * row_elems;
    uint8_t* row_signs = signs + r * sign_row;
    size_t k = 0;
#if defined(__SSE2__)
    // 16 elements a step: the bytes split, the signs gathered by movemask (bit j = element j).
    const __m128i low = _mm_set1_epi16(0x00FF), low7 = _mm_set1_epi8(0x7F);
    for (; k + 16 <= row_elems; k += 16) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * k));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * k + 16));
      const __m128i l = _mm_packus_epi16(_mm_and_si128(a, low), _mm_and_si128(b, low));
      const __m128i h = _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));
      const int m = _mm_movemask_epi8(h);
      row_signs[k / 8] = static_cast<uint8_t>(m);
      row_signs[k / 8 + 1] = static_cast<uint8_t>(m >> 8);
      __m128i e = _mm_and_si128(h, low7);
      if (base != nullptr)
        e = _mm_and_si128(
            _mm_sub_epi8(e, _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + k))), low7);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(row_lo + k), l);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(row_plane + k), e);
    }
#endif
    for (; k < row_elems; ++k) {
      const uint8_t hi = src[2 * k + 1];
      row_lo[k] = src[2 * k];
      row_signs[k / 8] |= static_cast<uint8_t>((hi >> 7) << (k % 8));
      row_plane[k] = static_cast<uint8_t>(((hi & 0x7F) - (base != nullptr ? base[k] & 0x7F : 0)) &
                                          0x7F);
    }
  }
  out->insert(out->end(), job.scratch.a.data(), job.scratch.a.data() + fixed);
  const size_t coded_start = out->size();
  LIBSHARD_ASSIGN_OR_RETURN(uint8_t mode,
                            AppendCoded(job.scratch.cctx.get(), job.options.entropy,
                                        job.options.level, job.scratch.a.data() + fixed, n, true,
                                        out));
  return ChunkEntry{.coded_size = static_cast<uint32_t>(out->size() - coded_start), .mode = mode};
}

Status DecodeChunk(DecodeScratch& s, const FieldGeometry& g, const ChunkView& c,
                   uint8_t* chunk_out) {
  const auto* lo = reinterpret_cast<const uint8_t*>(c.fixed);
  const uint8_t* signs = lo + c.n;  // after the low bytes of all the chunk's rows
  LIBSHARD_ASSIGN_OR_RETURN(const uint8_t* plane, s.BytePlane(c));
  InterleaveSigned(lo, plane, signs, c.base, static_cast<size_t>(g.row_elems),
                   static_cast<size_t>(c.need), chunk_out);
#if defined(__SSE2__)
  _mm_sfence();  // the non-temporal stores of InterleaveSigned, before anyone reads dst
#endif
  return Status::OK();
}

}  // namespace

const CodecEntry kPlanes2Codec = {
    .id = CodecId::kPlanes2,
    .name = "planes2",
    .lossy = false,
    .has_region = true,
    .flags = kFlagChannelBase,
    .coded_modes = (1 << kModeZstd) | (1 << kModeHuffman),
    .accepts = AcceptsHalf,
    .coded_row_bytes = RowElemBytes,
    .fixed_row_bytes = FixedRowBytes,
    .prepare = Prepare,
    .encode_chunk = EncodeChunk,
    .decode_chunk = DecodeChunk,
};

}  // namespace libshard::codec
