// The byte-plane kernels of the field codecs: FORMAT.md §4.3.4, §4.3.5.
#include "codec/plane_kernels.h"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <limits>
#include <vector>

#include "codec/float8.h"
#include "util/env_knobs.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LIBSHARD_PLANES_AVX2 1
#endif

namespace libshard::codec {
namespace {

// Elements converted per step when a plane is decoded in place (§4.3 decoders stage one block).
constexpr size_t kBlock = 4096;

}  // namespace

// Undoes the channel base (§4.3.4, §4.3.5) on a block of plane bytes: v = (v + add(b)) ^ (b & 0x80)
// with add(b) = b & 0x7F for planes (fp8 = false) and 8 · (b & 0x0F) for fp8 codes.
void ApplyBase(uint8_t* block, const uint8_t* base, size_t m, bool fp8) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i sign = _mm_set1_epi8(static_cast<char>(0x80));
  for (; i + 16 <= m; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + i));
    const __m128i add = fp8 ? _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi8(0x0F)), 3)
                            : _mm_andnot_si128(sign, b);
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(block + i),
                     _mm_xor_si128(_mm_add_epi8(v, add), _mm_and_si128(b, sign)));
  }
#endif
  for (; i < m; ++i) {
    const uint8_t add = fp8 ? static_cast<uint8_t>((base[i] & 0x0F) << 3) : (base[i] & 0x7F);
    block[i] = static_cast<uint8_t>((block[i] + add) ^ (base[i] & 0x80));
  }
}

// The inverse of ApplyBase, for the writer.
uint8_t RemoveBase(uint8_t v, uint8_t b, bool fp8) {
  const uint8_t add = fp8 ? static_cast<uint8_t>((b & 0x0F) << 3) : (b & 0x7F);
  return static_cast<uint8_t>((v ^ (b & 0x80)) - add);
}

namespace {

// One run of m elements of a row (base: the run's channel bases, or null), fused: each 16
// elements are loaded, have their base undone and are written interleaved. In place (hi at or
// after d + m, as for a whole chunk) this is safe: a full vector's 32 output bytes end before
// the high bytes not yet read, and a scalar step writes below the byte it reads next.
void InterleaveRun(const uint8_t* lo, const uint8_t* hi, const uint8_t* base, size_t m,
                   uint8_t* d) {
  size_t i = 0;
#if defined(__SSE2__)
  // The output (twice the plane; a loader's arena, not read again soon) goes to memory with
  // non-temporal stores where it is 16-byte aligned: no read of the lines it overwrites, and the
  // cache keeps the planes being decoded. Decoder::Decode fences before it returns.
  const bool aligned = (reinterpret_cast<uintptr_t>(d) & 15) == 0;
  const __m128i sign = _mm_set1_epi8(static_cast<char>(0x80));
  for (; i + 16 <= m; i += 16) {
    const __m128i vl = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + i));
    __m128i vh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi + i));
    if (base != nullptr) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + i));
      vh = _mm_xor_si128(_mm_add_epi8(vh, _mm_andnot_si128(sign, b)), _mm_and_si128(b, sign));
    }
    if (aligned) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 2 * i), _mm_unpacklo_epi8(vl, vh));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 2 * i + 16), _mm_unpackhi_epi8(vl, vh));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 2 * i), _mm_unpacklo_epi8(vl, vh));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 2 * i + 16), _mm_unpackhi_epi8(vl, vh));
    }
  }
#endif
  for (; i < m; ++i) {
    uint8_t h = hi[i];
    if (base != nullptr) h = static_cast<uint8_t>((h + (base[i] & 0x7F)) ^ (base[i] & 0x80));
    const uint8_t l = lo[i];
    d[2 * i] = l;
    d[2 * i + 1] = h;
  }
}

}  // namespace

// Interleaves lo[i] and hi[i] (with the channel base undone) into dst, 2 bytes per element, for
// n elements that start at a row boundary. `base` is null or holds row_elems values. dst may
// overlap hi only as in-place decoding arranges (hi at or after dst + n, read block by block
// before the block's output is written).
void Interleave(const uint8_t* lo, const uint8_t* hi, const uint8_t* base, size_t row_elems,
                size_t n, uint8_t* dst) {
  if (base == nullptr) {
    InterleaveRun(lo, hi, nullptr, n, dst);
    return;
  }
  // Row by row, so each run's bases are contiguous (n starts at a row boundary).
  for (size_t start = 0; start < n; start += row_elems) {
    const size_t m = std::min(row_elems, n - start);
    InterleaveRun(lo + start, hi + start, base, m, dst + 2 * start);
  }
}

namespace {

// One row of codec 5 (§4.3.7): m elements, their channel bases (or null) and sign bitmap.
void InterleaveSignedRow(const uint8_t* lo, const uint8_t* plane, const uint8_t* signs,
                         const uint8_t* base, size_t m, uint8_t* d) {
  size_t i = 0;
#if defined(__SSE2__)
  // As InterleaveRun: non-temporal stores where the output is 16-byte aligned.
  const bool aligned = (reinterpret_cast<uintptr_t>(d) & 15) == 0;
  const __m128i low7 = _mm_set1_epi8(0x7F), top = _mm_set1_epi8(static_cast<char>(0x80));
  // Bit j of each byte of a bitmap byte broadcast 8 times, j = 0..7, twice.
  const __m128i bit = _mm_set_epi8(static_cast<char>(0x80), 0x40, 0x20, 0x10, 8, 4, 2, 1,
                                   static_cast<char>(0x80), 0x40, 0x20, 0x10, 8, 4, 2, 1);
  for (; i + 16 <= m; i += 16) {
    const __m128i vl = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + i));
    __m128i vh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(plane + i));
    if (base != nullptr)
      vh = _mm_add_epi8(vh, _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + i)));
    // Signs of elements i..i+15: bitmap bytes i/8 and i/8 + 1, each spread over 8 bytes.
    __m128i sb = _mm_cvtsi32_si128(signs[i / 8] | (signs[i / 8 + 1] << 8));
    sb = _mm_unpacklo_epi8(sb, sb);
    sb = _mm_unpacklo_epi16(sb, sb);
    sb = _mm_unpacklo_epi32(sb, sb);
    const __m128i sign = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(sb, bit), bit), top);
    vh = _mm_or_si128(_mm_and_si128(vh, low7), sign);
    if (aligned) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 2 * i), _mm_unpacklo_epi8(vl, vh));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 2 * i + 16), _mm_unpackhi_epi8(vl, vh));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 2 * i), _mm_unpacklo_epi8(vl, vh));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 2 * i + 16), _mm_unpackhi_epi8(vl, vh));
    }
  }
#endif
  for (; i < m; ++i) {
    const uint8_t b = base != nullptr ? base[i] : 0;
    const uint8_t sign = static_cast<uint8_t>(((signs[i / 8] >> (i % 8)) & 1) << 7);
    d[2 * i] = lo[i];
    d[2 * i + 1] = static_cast<uint8_t>(((plane[i] + b) & 0x7F) | sign);
  }
}

#if defined(LIBSHARD_PLANES_AVX2)
// InterleaveSignedRow, 32 elements a step on CPUs with AVX2 (the library is built for baseline
// x86-64, so this is chosen at run time): the same bytes, half the instructions per element.
// The loader's decode of codec 5 spends most of its time here.
__attribute__((target("avx2"))) void InterleaveSignedRowAvx2(const uint8_t* lo,
                                                             const uint8_t* plane,
                                                             const uint8_t* signs,
                                                             const uint8_t* base, size_t m,
                                                             uint8_t* d) {
  size_t i = 0;
  const bool aligned = (reinterpret_cast<uintptr_t>(d) & 31) == 0;
  const __m256i low7 = _mm256_set1_epi8(0x7F), top = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  // Byte k of the 4 bitmap bytes (broadcast to both lanes) spread over bytes 8k..8k+7.
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  for (; i + 32 <= m; i += 32) {
    const __m256i vl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + i));
    __m256i vh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(plane + i));
    if (base != nullptr)
      vh = _mm256_add_epi8(vh, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + i)));
    // Signs of elements i..i+31: bitmap bytes i/8 .. i/8 + 3 (within the row: i + 32 <= m).
    uint32_t s4;
    std::memcpy(&s4, signs + i / 8, 4);
    const __m256i sb = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(s4)), spread);
    const __m256i sign = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(sb, bit), bit), top);
    vh = _mm256_or_si256(_mm256_and_si256(vh, low7), sign);
    // Per 128-bit lane: a = elements 0-7 | 16-23, b = 8-15 | 24-31; put them back in order.
    const __m256i a = _mm256_unpacklo_epi8(vl, vh), b = _mm256_unpackhi_epi8(vl, vh);
    const __m256i out0 = _mm256_permute2x128_si256(a, b, 0x20);
    const __m256i out1 = _mm256_permute2x128_si256(a, b, 0x31);
    if (aligned) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 2 * i), out0);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 2 * i + 32), out1);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 2 * i), out0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 2 * i + 32), out1);
    }
  }
  // The rest (fewer than 32 elements) as the baseline kernel does them; i is a multiple of 8,
  // so the sign bitmap continues at byte i / 8.
  if (i < m) InterleaveSignedRow(lo + i, plane + i, signs + i / 8,
                                 base != nullptr ? base + i : nullptr, m - i, d + 2 * i);
}

bool HaveAvx2() {
  static const bool have = [] {
    if (const std::string v = EnvKnobsOrDefaults().planes_kernel; !v.empty() && v != "auto")
      return v != "sse2";  // LIBSHARD_PLANES_KERNEL=sse2: the baseline kernel
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return have;
}
#endif

}  // namespace

void InterleaveSigned(const uint8_t* lo, const uint8_t* plane, const uint8_t* signs,
                      const uint8_t* base, size_t row_elems, size_t rows, uint8_t* dst) {
  const size_t sign_row = SignRowBytes(row_elems);
#if defined(LIBSHARD_PLANES_AVX2)
  if (HaveAvx2()) {
    for (size_t r = 0; r < rows; ++r)
      InterleaveSignedRowAvx2(lo + r * row_elems, plane + r * row_elems, signs + r * sign_row,
                              base, row_elems, dst + 2 * r * row_elems);
    return;
  }
#endif
  for (size_t r = 0; r < rows; ++r)
    InterleaveSignedRow(lo + r * row_elems, plane + r * row_elems, signs + r * sign_row, base,
                        row_elems, dst + 2 * r * row_elems);
}

namespace {

// float32 values of the 256 e4m3fn codes.
struct E4M3Table {
  float v[256];
  E4M3Table() {
    for (int c = 0; c < 256; ++c) v[c] = E4M3ToF32(static_cast<uint8_t>(c));
  }
};
const E4M3Table& E4M3Values() {
  static const E4M3Table table;
  return table;
}

// lut[c] = F32ToBF16(value[c] * scale) for the 256 codes, four at a time (the same float
// multiply and the same rounding, so the same bits; codec_test checks every code).
void Bf16Table(const float* value, float scale, uint16_t* lut) {
  int c = 0;
#if defined(__SSE2__)
  const __m128i abs_mask = _mm_set1_epi32(0x7FFFFFFF), inf = _mm_set1_epi32(0x7F800000);
  const __m128i one = _mm_set1_epi32(1), half = _mm_set1_epi32(0x7FFF);
  const __m128i sign16 = _mm_set1_epi32(0x8000), qnan = _mm_set1_epi32(0x7FC0);
  const __m128 s = _mm_set1_ps(scale);
  auto convert = [&](const float* v) {
    const __m128i bits = _mm_castps_si128(_mm_mul_ps(_mm_loadu_ps(v), s));
    const __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(bits, abs_mask), inf);
    const __m128i hi = _mm_srli_epi32(bits, 16);
    const __m128i rounded =
        _mm_srli_epi32(_mm_add_epi32(bits, _mm_add_epi32(half, _mm_and_si128(hi, one))), 16);
    const __m128i nan_value = _mm_or_si128(_mm_and_si128(hi, sign16), qnan);
    const __m128i r = _mm_or_si128(_mm_and_si128(nan, nan_value), _mm_andnot_si128(nan, rounded));
    return _mm_srai_epi32(_mm_slli_epi32(r, 16), 16);  // as int16, for the signed pack
  };
  for (; c < 256; c += 8)
    _mm_store_si128(reinterpret_cast<__m128i*>(lut + c),
                    _mm_packs_epi32(convert(value + c), convert(value + c + 4)));
#endif
  for (; c < 256; ++c) lut[c] = F32ToBF16(value[c] * scale);
}

}  // namespace

// Codec 6 (§4.3.8): m codes from their nibbles (element 2j low, 2j + 1 high nibble of byte j),
// their plane bytes and channel bases (or null).
void Fp8PlanesCodes(const uint8_t* nibbles, const uint8_t* plane, const uint8_t* base, size_t m,
                    uint8_t* codes) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i low4 = _mm_set1_epi8(0x0F), low3 = _mm_set1_epi8(0x07);
  const __m128i top = _mm_set1_epi8(static_cast<char>(0x80));
  for (; i + 16 <= m; i += 16) {
    // 8 nibble bytes -> 16 nibbles in element order. Every byte stays below 16 (nibbles, the
    // masked plane), so the 16-bit shifts below never carry into a neighbouring byte.
    const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(nibbles + i / 2));
    const __m128i nib =
        _mm_unpacklo_epi8(_mm_and_si128(x, low4), _mm_and_si128(_mm_srli_epi16(x, 4), low4));
    __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(plane + i));
    if (base != nullptr)
      p = _mm_add_epi8(p, _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + i)));
    p = _mm_and_si128(p, low4);
    const __m128i code = _mm_or_si128(
        _mm_or_si128(_mm_and_si128(_mm_slli_epi16(nib, 4), top), _mm_slli_epi16(p, 3)),
        _mm_and_si128(nib, low3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), code);
  }
#endif
  for (; i < m; ++i) {
    const uint8_t nib = static_cast<uint8_t>((nibbles[i / 2] >> (4 * (i & 1))) & 0x0F);
    const uint8_t e = static_cast<uint8_t>((plane[i] + (base != nullptr ? base[i] : 0)) & 0x0F);
    codes[i] = static_cast<uint8_t>(((nib & 8) << 4) | (e << 3) | (nib & 7));
  }
}

void SplitFp8Planes(const uint8_t* codes, const uint8_t* base, size_t m, uint8_t* nibbles,
                    uint8_t* plane) {
  for (size_t j = 0; j < m / 2; ++j) {
    const uint8_t a = codes[2 * j], b = codes[2 * j + 1];
    nibbles[j] = static_cast<uint8_t>(((a >> 4) & 8) | (a & 7) | ((((b >> 4) & 8) | (b & 7)) << 4));
  }
  if (m % 2 != 0) nibbles[m / 2] = static_cast<uint8_t>(((codes[m - 1] >> 4) & 8) | (codes[m - 1] & 7));
  for (size_t k = 0; k < m; ++k)
    plane[k] = static_cast<uint8_t>((((codes[k] >> 3) & 0x0F) - (base != nullptr ? base[k] : 0)) &
                                    0x0F);
}

namespace {

// Dequantizes n codes of one row (§4.3.5), block by block: fill(start, m, block) puts the codes
// of elements [start, start + m) into block (m <= kBlock, start a multiple of kBlock).
template <typename Fill>
void DequantizeBlocks(size_t n, float scale, DType dtype, uint8_t* dst, Fill&& fill) {
  const float* value = E4M3Values().v;
  const bool bf16 = dtype == DType::kBFloat16;
  // Rows of 128 elements or more (every hidden size in use): the 256 results of this row's scale
  // first (bf16: four at a time), then one lookup per element (the same arithmetic, so the same
  // bits). The former 512 left H = 384 (MiniLM) on the per-element conversion, several times
  // slower.
  alignas(16) uint16_t lut[256];
  const bool use_lut = n >= 128;
  if (use_lut && bf16) {
    Bf16Table(value, scale, lut);
  } else if (use_lut) {
    for (int c = 0; c < 256; ++c) lut[c] = F32ToF16(value[c] * scale);
  }
  uint8_t block[kBlock];
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t m = std::min(kBlock, n - start);
    fill(start, m, block);
    uint8_t* d = dst + 2 * start;
    if (use_lut) {
      // Four codes a step, one 8-byte store (little-endian hosts, as the format's bytes).
      size_t i = 0;
      for (; i + 4 <= m; i += 4) {
        const uint64_t v = uint64_t{lut[block[i]]} | (uint64_t{lut[block[i + 1]]} << 16) |
                           (uint64_t{lut[block[i + 2]]} << 32) |
                           (uint64_t{lut[block[i + 3]]} << 48);
        std::memcpy(d + 2 * i, &v, 8);
      }
      for (; i < m; ++i) {
        const uint16_t v = lut[block[i]];
        d[2 * i] = static_cast<uint8_t>(v);
        d[2 * i + 1] = static_cast<uint8_t>(v >> 8);
      }
    } else if (bf16) {
      for (size_t i = 0; i < m; ++i) {
        const uint16_t v = F32ToBF16(value[block[i]] * scale);
        d[2 * i] = static_cast<uint8_t>(v);
        d[2 * i + 1] = static_cast<uint8_t>(v >> 8);
      }
    } else {
      for (size_t i = 0; i < m; ++i) {
        const uint16_t v = F32ToF16(value[block[i]] * scale);
        d[2 * i] = static_cast<uint8_t>(v);
        d[2 * i + 1] = static_cast<uint8_t>(v >> 8);
      }
    }
  }
}

#if defined(LIBSHARD_PLANES_AVX2)
// The fast path (issue 26). For a code with exponent field e ≥ 1 (not NaN), E(code) =
// ±(1 + m/8) · 2^(e−7), so E(code) · s is the e = 1 product times 2^(e−1), exactly. When that
// product's exact value is a normal float32 for e = 1 and the e = 15 one is finite, the float32
// rounding commutes with the power of two, and so does the rounding into the output while it
// stays normal and finite there (bfloat16: float32's exponent range; float16: ≥ 2^-14 and below
// 65520): the result's bits are those of the e = 1 code plus (e − 1) << k (k = 7 bfloat16, 10
// float16; a mantissa that rounds up into the next binade does so for every e alike). So a row
// needs three 16-entry tables of 16-bit results indexed by the nibble sign << 3 | m: `norm`
// (e = 1, less 1 << k, so that the add is e << k), `sub` (e = 0) and `nan` (e = 15, m = 7); each
// as a low-byte and a high-byte table for pshufb. Rows whose scale does not qualify (tiny, huge,
// NaN or ±inf) take the 256-entry table path; codec_test compares the two on every code at
// scales across the whole float32 range.
struct FastTables {
  alignas(16) uint8_t norm_lo[16], norm_hi[16], sub_lo[16], sub_hi[16], nan_lo[16], nan_hi[16];
  int shift;  // k
};

// Fills t for `scale` and returns true when the row qualifies, with the very conversions of the
// table path (value · scale in float32, then F32ToBF16 / F32ToF16).
bool MakeFastTables(float scale, bool bf16, FastTables* t) {
  const float* value = E4M3Values().v;
  const float a = std::fabs(scale);
  const uint32_t a_bits = std::bit_cast<uint32_t>(a);
  const float top = 448.0f * a;  // |the e = 15 products| are at most this (monotone rounding)
  if (bf16) {
    // |s| ≥ 2^-120: the exact e = 1 products, ≥ |s| · 2^-6, are normal float32.
    if (a_bits < (7u << 23) || F32ToBF16(top) >= 0x7F80) return false;
  } else {
    // |s| ≥ 2^-8: every e ≥ 1 product ≥ 2^-14 (float16 normal); below 65520: finite.
    if (a_bits < (119u << 23) || std::bit_cast<uint32_t>(top) >= 0x477FF000u) return false;
  }
  t->shift = bf16 ? 7 : 10;
  auto conv = [&](uint8_t code) {
    const float y = value[code] * scale;
    return bf16 ? F32ToBF16(y) : F32ToF16(y);
  };
  // The negative codes' results are the positive ones' with the sign bit flipped (a float32
  // product and both roundings are symmetric in the sign, ±0 included); NaN computed as it is.
  for (int m = 0; m < 8; ++m) {
    const uint16_t norm = static_cast<uint16_t>(conv(static_cast<uint8_t>(0x08 | m)) -
                                                (1u << t->shift));
    const uint16_t sub = conv(static_cast<uint8_t>(m));
    t->norm_lo[m] = t->norm_lo[m + 8] = static_cast<uint8_t>(norm);
    t->norm_hi[m] = static_cast<uint8_t>(norm >> 8);
    t->norm_hi[m + 8] = static_cast<uint8_t>((norm >> 8) ^ 0x80);
    t->sub_lo[m] = t->sub_lo[m + 8] = static_cast<uint8_t>(sub);
    t->sub_hi[m] = static_cast<uint8_t>(sub >> 8);
    t->sub_hi[m + 8] = static_cast<uint8_t>((sub >> 8) ^ 0x80);
  }
  const uint16_t nan_pos = conv(0x7F), nan_neg = conv(0xFF);
  for (int nib = 0; nib < 16; ++nib) {
    const uint16_t nan = nib < 8 ? nan_pos : nan_neg;
    t->nan_lo[nib] = static_cast<uint8_t>(nan);
    t->nan_hi[nib] = static_cast<uint8_t>(nan >> 8);
  }
  return true;
}

// One element from its nibble (sign << 3 | m) and exponent field, as the vector kernel does.
inline uint16_t FastOne(const FastTables& t, uint8_t nib, uint8_t e) {
  if (e == 0) return static_cast<uint16_t>(t.sub_lo[nib] | (t.sub_hi[nib] << 8));
  if (e == 15 && (nib & 7) == 7) return static_cast<uint16_t>(t.nan_lo[nib] | (t.nan_hi[nib] << 8));
  return static_cast<uint16_t>((t.norm_lo[nib] | (t.norm_hi[nib] << 8)) + (e << t.shift));
}

struct FastVecs {
  __m256i norm_lo, norm_hi, sub_lo, sub_hi, nan_lo, nan_hi;
  __m128i shift;
};

__attribute__((target("avx2"))) inline __m256i Dup16(const uint8_t* p) {
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
}

__attribute__((target("avx2"))) inline FastVecs LoadFast(const FastTables& t) {
  return FastVecs{Dup16(t.norm_lo), Dup16(t.norm_hi), Dup16(t.sub_lo), Dup16(t.sub_hi),
                  Dup16(t.nan_lo),  Dup16(t.nan_hi),  _mm_cvtsi32_si128(t.shift)};
}

// 32 elements from their nibbles (0..15) and exponent fields (0..15), written to d (64 bytes).
__attribute__((target("avx2"))) inline void FastStep(const FastVecs& v, __m256i nib, __m256i e,
                                                     uint8_t* d) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i key = _mm256_or_si256(_mm256_and_si256(nib, _mm256_set1_epi8(7)),
                                      _mm256_slli_epi16(e, 3));  // < 128: no carry across bytes
  const __m256i nan = _mm256_cmpeq_epi8(key, _mm256_set1_epi8(0x7F));
  const __m256i sub = _mm256_cmpeq_epi8(e, zero);
  __m256i lo = _mm256_shuffle_epi8(v.norm_lo, nib), hi = _mm256_shuffle_epi8(v.norm_hi, nib);
  lo = _mm256_blendv_epi8(lo, _mm256_shuffle_epi8(v.sub_lo, nib), sub);
  hi = _mm256_blendv_epi8(hi, _mm256_shuffle_epi8(v.sub_hi, nib), sub);
  lo = _mm256_blendv_epi8(lo, _mm256_shuffle_epi8(v.nan_lo, nib), nan);
  hi = _mm256_blendv_epi8(hi, _mm256_shuffle_epi8(v.nan_hi, nib), nan);
  e = _mm256_andnot_si256(nan, e);  // NaN: nothing added (e = 0 adds nothing either)
  const __m256i w0 = _mm256_add_epi16(_mm256_unpacklo_epi8(lo, hi),
                                      _mm256_sll_epi16(_mm256_unpacklo_epi8(e, zero), v.shift));
  const __m256i w1 = _mm256_add_epi16(_mm256_unpackhi_epi8(lo, hi),
                                      _mm256_sll_epi16(_mm256_unpackhi_epi8(e, zero), v.shift));
  // Per 128-bit lane: w0 = elements 0-7 | 16-23, w1 = 8-15 | 24-31; put them back in order.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_permute2x128_si256(w0, w1, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 32), _mm256_permute2x128_si256(w0, w1, 0x31));
}

// Codecs 3/4: n codes (channel bases undone when base is not null). Each step reads its 32 codes
// before it writes, so dst may overlap q as DequantizeRow allows.
__attribute__((target("avx2"))) void FastCodesRowAvx2(const FastTables& t, const uint8_t* q,
                                                      const uint8_t* base, size_t n,
                                                      uint8_t* dst) {
  const FastVecs v = LoadFast(t);
  const __m256i low3 = _mm256_set1_epi8(7), low4 = _mm256_set1_epi8(0x0F), bit3 = _mm256_set1_epi8(8);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i));
    if (base != nullptr) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + i));
      c = _mm256_xor_si256(_mm256_add_epi8(c, _mm256_slli_epi16(_mm256_and_si256(b, low4), 3)),
                           _mm256_and_si256(b, _mm256_set1_epi8(static_cast<char>(0x80))));
    }
    // Masked after the 16-bit shifts, so bits from the neighbouring byte never stay.
    const __m256i nib = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), bit3),
                                        _mm256_and_si256(c, low3));
    const __m256i e = _mm256_and_si256(_mm256_srli_epi16(c, 3), low4);
    FastStep(v, nib, e, dst + 2 * i);
  }
  for (; i < n; ++i) {
    uint8_t c = q[i];
    if (base != nullptr)
      c = static_cast<uint8_t>((c + ((base[i] & 0x0F) << 3)) ^ (base[i] & 0x80));
    const uint16_t y = FastOne(t, static_cast<uint8_t>(((c >> 4) & 8) | (c & 7)),
                               static_cast<uint8_t>((c >> 3) & 0x0F));
    dst[2 * i] = static_cast<uint8_t>(y);
    dst[2 * i + 1] = static_cast<uint8_t>(y >> 8);
  }
}

// Codec 6, fused: the nibble is the table index, so no code byte is rebuilt.
__attribute__((target("avx2"))) void FastPlanesRowAvx2(const FastTables& t,
                                                       const uint8_t* nibbles,
                                                       const uint8_t* plane, const uint8_t* base,
                                                       size_t n, uint8_t* dst) {
  const FastVecs v = LoadFast(t);
  const __m128i low4x = _mm_set1_epi8(0x0F);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibbles + i / 2));
    const __m128i a = _mm_and_si128(x, low4x), b = _mm_and_si128(_mm_srli_epi16(x, 4), low4x);
    const __m256i nib = _mm256_set_m128i(_mm_unpackhi_epi8(a, b), _mm_unpacklo_epi8(a, b));
    __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(plane + i));
    if (base != nullptr)
      p = _mm256_add_epi8(p, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + i)));
    FastStep(v, nib, _mm256_and_si256(p, low4), dst + 2 * i);
  }
  for (; i < n; ++i) {
    const uint8_t nib = static_cast<uint8_t>((nibbles[i / 2] >> (4 * (i & 1))) & 0x0F);
    const uint8_t e = static_cast<uint8_t>((plane[i] + (base != nullptr ? base[i] : 0)) & 0x0F);
    const uint16_t y = FastOne(t, nib, e);
    dst[2 * i] = static_cast<uint8_t>(y);
    dst[2 * i + 1] = static_cast<uint8_t>(y >> 8);
  }
}

// Whether the fast path may run: AVX2 (and LIBSHARD_PLANES_KERNEL not "sse2").
bool FastAllowed(Fp8Kernel kernel) { return kernel != Fp8Kernel::kTable && HaveAvx2(); }
#endif

}  // namespace

// Dequantizes n codes of one row into 2-byte floats of `dtype` (§4.3.5). `base` is null or the
// channel base table. dst may overlap q as Interleave describes.
void DequantizeRow(const uint8_t* q, const uint8_t* base, size_t n, float scale, DType dtype,
                   uint8_t* dst, Fp8Kernel kernel) {
  (void)kernel;  // without AVX2 every row takes the table path
#if defined(LIBSHARD_PLANES_AVX2)
  FastTables t;
  if (FastAllowed(kernel) && MakeFastTables(scale, dtype == DType::kBFloat16, &t)) {
    FastCodesRowAvx2(t, q, base, n, dst);
    return;
  }
#endif
  DequantizeBlocks(n, scale, dtype, dst, [&](size_t start, size_t m, uint8_t* block) {
    std::memcpy(block, q + start, m);
    if (base != nullptr) ApplyBase(block, base + start, m, true);
  });
}

void DequantizeFp8PlanesRow(const uint8_t* nibbles, const uint8_t* plane, const uint8_t* base,
                            size_t n, float scale, DType dtype, uint8_t* dst, Fp8Kernel kernel) {
  (void)kernel;
#if defined(LIBSHARD_PLANES_AVX2)
  FastTables t;
  if (FastAllowed(kernel) && MakeFastTables(scale, dtype == DType::kBFloat16, &t)) {
    FastPlanesRowAvx2(t, nibbles, plane, base, n, dst);
    return;
  }
#endif
  DequantizeBlocks(n, scale, dtype, dst, [&](size_t start, size_t m, uint8_t* block) {
    // start is a multiple of kBlock, so even: its nibbles begin at byte start / 2.
    Fp8PlanesCodes(nibbles + start / 2, plane + start, base != nullptr ? base + start : nullptr,
                   m, block);
  });
}

// Per row: scale = absmax of the finite values / 448 and the e4m3fn codes of x / scale (§4.3.5).
void QuantizeRows(const uint8_t* src, const FieldGeometry& g, float* scales, uint8_t* codes) {
  const bool bf16 = g.dtype == DType::kBFloat16;
  std::vector<float> x(g.row_elems);
  for (uint64_t r = 0; r < g.rows; ++r) {
    const uint8_t* row = src + r * g.row_elems * 2;
    float absmax = 0.0f;
    for (uint64_t i = 0; i < g.row_elems; ++i) {
      const uint16_t h = static_cast<uint16_t>(row[2 * i] | (row[2 * i + 1] << 8));
      x[i] = bf16 ? BF16ToF32(h) : F16ToF32(h);
      const float a = std::fabs(x[i]);
      absmax = a <= std::numeric_limits<float>::max() && a > absmax ? a : absmax;  // finite only
    }
    const float scale = absmax / kE4M3Max;
    scales[r] = scale;
    uint8_t* q = codes + r * g.row_elems;
    if (scale > 0.0f) {
      for (uint64_t i = 0; i < g.row_elems; ++i) q[i] = F32ToE4M3(x[i] / scale);
    } else {
      // Every finite value of the row is ±0.
      for (uint64_t i = 0; i < g.row_elems; ++i) q[i] = F32ToE4M3(x[i]);
    }
  }
}

}  // namespace libshard::codec
