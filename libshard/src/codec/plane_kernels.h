// The byte-plane kernels of the field codecs (FORMAT.md §4.3.4, §4.3.5): the channel base, the
// planes interleave, fp8 quantization and dequantization. Bytes in, bytes out; the caller checks
// every size (these trust theirs). SSE2 where the build has it, the same bits either way.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/field_codec.h"
#include "libshard/dtype.h"

namespace libshard::codec {

// Undoes the channel base on m plane bytes: v = (v + add(b)) ^ (b & 0x80) with add(b) = b & 0x7F
// for planes (fp8 = false) and 8 · (b & 0x0F) for fp8 codes.
void ApplyBase(uint8_t* block, const uint8_t* base, size_t m, bool fp8);
// The inverse of ApplyBase on one byte, for the writer.
uint8_t RemoveBase(uint8_t v, uint8_t b, bool fp8);

// Interleaves lo[i] and hi[i] (hi with the channel base undone when `base`, row_elems bytes, is
// not null) into dst, 2 bytes per element, for n elements that start at a row boundary. Aligned
// output is written with non-temporal stores: the caller fences (_mm_sfence) before dst is read
// by another thread.
void Interleave(const uint8_t* lo, const uint8_t* hi, const uint8_t* base, size_t row_elems,
                size_t n, uint8_t* dst);

// Codec 5 (§4.3.7): the bytes of one sign bitmap row, ceil(row_elems / 8).
inline size_t SignRowBytes(size_t row_elems) { return (row_elems + 7) / 8; }

// Codec 5's decode of `rows` whole rows (§4.3.7), fused: for element i of row r,
// hi = ((plane[i] + b) & 0x7F) | sign << 7 (b = base[i mod row_elems], 0 when base is null; the
// sign from bit i mod 8 of byte i / 8 of the row's bitmap at signs + r · SignRowBytes) and
// dst gets (lo[i], hi), 2 bytes per element. Aligned output is written with non-temporal stores,
// as Interleave's: the caller fences.
void InterleaveSigned(const uint8_t* lo, const uint8_t* plane, const uint8_t* signs,
                      const uint8_t* base, size_t row_elems, size_t rows, uint8_t* dst);

// Dequantizes n e4m3fn codes of one row into 2-byte floats of `dtype` (bfloat16 or float16)
// with `scale` (§4.3.5). `base` is null or the channel base table. dst may overlap q when q lies
// at or after dst + n (each block of codes is copied before its output is written).
// Which fp8 dequantization kernel: kAuto is the AVX2 fast path (16-entry tables per row, rows whose
// scale allows it; the AVX2 kernels are chosen, codec/plane_kernel_select.h) with the 256-entry
// table path for the others; kTable always the table path (the reference, for tests and benches).
// The same bits either way.
enum class Fp8Kernel { kAuto, kTable };

void DequantizeRow(const uint8_t* q, const uint8_t* base, size_t n, float scale, DType dtype,
                   uint8_t* dst, Fp8Kernel kernel = Fp8Kernel::kAuto);

// Codec 6 (§4.3.8): the bytes of one nibble row, ceil(row_elems / 2).
inline size_t NibbleRowBytes(size_t row_elems) { return (row_elems + 1) / 2; }

// Codec 6: m codes of one row from its nibble row (element 2j in the low nibble of byte j, 2j + 1
// in the high one), its plane bytes and its channel bases (null: 0):
// code = (nib & 8) << 4 | ((plane + b) & 0x0F) << 3 | (nib & 7). Any byte values.
void Fp8PlanesCodes(const uint8_t* nibbles, const uint8_t* plane, const uint8_t* base, size_t m,
                    uint8_t* codes);
// The inverse, for the writer: m codes of one row into its nibble row (ceil(m / 2) bytes, a pad
// nibble 0) and its plane ((code >> 3 & 0x0F) - b mod 16).
void SplitFp8Planes(const uint8_t* codes, const uint8_t* base, size_t m, uint8_t* nibbles,
                    uint8_t* plane);
// Codec 6's decode of one row, fused: Fp8PlanesCodes block by block, each block dequantized as
// DequantizeRow does (the same bits).
void DequantizeFp8PlanesRow(const uint8_t* nibbles, const uint8_t* plane, const uint8_t* base,
                            size_t n, float scale, DType dtype, uint8_t* dst,
                            Fp8Kernel kernel = Fp8Kernel::kAuto);

// Per row of `g`: scale = absmax of the finite values / 448 and the e4m3fn codes of x / scale
// (§4.3.5). src holds g.elements() 2-byte floats of g.dtype.
void QuantizeRows(const uint8_t* src, const FieldGeometry& g, float* scales, uint8_t* codes);

}  // namespace libshard::codec
