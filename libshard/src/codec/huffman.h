// A static Huffman coder for one byte plane, built for decode speed: codes of at most 11 bits,
// four interleaved bit streams, and a decode table that yields several symbols per lookup.
//
// Coded layout (little-endian): 128 bytes of code lengths (4 bits per symbol, symbol 2k in the low
// nibble of byte k; 0 = absent, else 1..11), u32 byte sizes of streams 0, 1 and 2, then the four
// streams back to back (stream 3 takes the rest). Stream k holds symbols [k·q, min(n, (k+1)·q)),
// q = ceil(n / 4), as canonical codes (shorter codes first, then by symbol), written LSB first
// (the code's bits reversed), the last byte zero-padded.
//
// Decode never reads or writes out of bounds on any input; an input that does not describe
// exactly n symbols in exactly its streams is a Corruption. An incomplete code is accepted (bit
// patterns it leaves unassigned decode as symbol 0), so such bytes decode to values only the
// sample checksum can tell from the encoder's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "libshard/status.h"

namespace libshard::codec::huffman {

inline constexpr int kMaxBits = 11;
inline constexpr size_t kHeaderSize = 128 + 12;

// Appends the coded form of src[0..n) to out. n ≥ 1.
void Encode(const uint8_t* src, size_t n, std::vector<std::byte>* out);

// Decodes exactly n symbols from coded[0..size) into dst[0..n).
Status Decode(const std::byte* coded, size_t size, uint8_t* dst, size_t n);

// The decode table's shapes (what is on disk is the same for all): a window of 11 or 12 bits
// (codes stay at most 11 bits long; a wider window takes more short codes per lookup) and runs
// of at most 6 or 7 symbols per lookup. For codec_bench and codec_test, which compare them;
// every variant gives Decode's result and verdict on every input.
enum class DecoderVariant { kWindow11Run6, kWindow11Run7, kWindow12Run6, kWindow12Run7 };
Status DecodeVariant(DecoderVariant v, const std::byte* coded, size_t size, uint8_t* dst, size_t n);

}  // namespace libshard::codec::huffman
