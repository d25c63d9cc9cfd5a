// libFuzzer target for the field codecs (FORMAT.md §4.3): the decoder on arbitrary regions, and
// encode -> (mutate) -> decode of arbitrary bf16/fp16 tensors; and row blocks (§3.10.2): rows
// [a, b) decoded from a region's head and the chunks covering them (Decoder::DecodeRows) equal
// those rows of the whole decode, a region's blocks (CodedFieldBlocks) place its chunks from the
// index alone (PlaceCodedBlocks) where ChunkPlaces finds them, and forged blocks are refused.
//
// Input: 8 header bytes, then a payload.
//   byte 0: bits 0-1 codec (1..4); bit 2 float16 instead of bfloat16; bit 3 round-trip mode;
//           bit 5 with codec 2: codec 5 (planes2) instead; with codec 4: codec 6 (fp8-planes);
//           bits 4-6 in decode mode with codec 1: another dtype (int64, uint8, float32, ...);
//           bit 4 in round-trip mode: zstd for planes and fp8-planes, Huffman for fp8-entropy (the
//           non-defaults);
//           bit 7: row_elems = 8 · byte 2
//   byte 1: rows (0..255)      byte 2: row_elems (0..255, or 8 times that)     byte 3: max_rows for a prefix decode
//   byte 4: chunk_elems / 8 (round trip)   bytes 5-6: u16 position, byte 7: xor mask (mutation)
// Decode mode: the payload is the region. Round-trip mode: the payload is the tensor's bytes
// (rows clamped to what it holds); lossless codecs must give back every bit, fp8 must decode and
// agree with its codes (fp8-planes' codes and scales: codec 3's), rows [byte 3 mod rows, byte 1)
// decode from the head and the covering chunks alone (chunk rows byte 4 / 8 + 1: row blocks);
// then one byte of the region is xored and decoded again.
// Every decode must succeed or fail with Corruption, within the destination's bounds.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codec/field_codec.h"
#include "codec/float8.h"
#include "codec/row_blocks.h"
#include "fuzz_util.h"

namespace {

using namespace libshard;
using codec::CodecId;

bool Same(const std::byte* a, const std::byte* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;  // memcmp of null pointers is undefined, even for 0
}

void CheckStatus(const Status& st) {
  if (!st.ok() && st.code() != StatusCode::kCorruption) __builtin_trap();
}

// DecodeRows of rows [a, b) with the region's first `head` bytes as its head and the rest as
// its body: succeeds or fails with Corruption (or InvalidArgument when the head read is shorter
// than the region's tables say), within bounds.
void DecodeRowsOf(codec::Decoder& d, std::span<const std::byte> region, CodecId id,
                  const codec::FieldGeometry& g, uint64_t a, uint64_t b, size_t head) {
  if (a >= b || b > g.rows) return;
  head = std::min(head, region.size());
  std::vector<std::byte> out((b - a) * g.row_elems * DTypeSize(g.dtype));
  const Status st = d.DecodeRows(region.first(head), region.size(), region.subspan(head), head,
                                 id, g, a, b, out);
  if (!st.ok() && st.code() != StatusCode::kCorruption &&
      st.code() != StatusCode::kInvalidArgument)
    __builtin_trap();
}

void DecodeAll(codec::Decoder& d, std::span<const std::byte> region, CodecId id,
               const codec::FieldGeometry& g, uint64_t max_rows) {
  DecodeRowsOf(d, region, id, g, max_rows % std::max<uint64_t>(g.rows, 1), g.rows,
               region.size() / 2);
  for (uint64_t rows : {UINT64_MAX, max_rows}) {
    std::vector<std::byte> out(codec::DecodedBytes(g, rows));
    CheckStatus(d.Decode(region, id, g, rows, out));
    if (codec::IsLossy(id)) {
      const uint64_t r = std::min(rows, g.rows);
      std::vector<uint8_t> codes(r * g.row_elems);
      std::vector<float> scales(r);
      CheckStatus(d.DecodeFp8(region, id, g, rows, codes, scales));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  auto id = static_cast<CodecId>(1 + (data[0] & 3));
  if (id == CodecId::kPlanes && (data[0] & 0x20)) id = CodecId::kPlanes2;
  if (id == CodecId::kFp8Entropy && (data[0] & 0x20)) id = CodecId::kFp8Planes;
  DType dtype = (data[0] & 4) ? DType::kFloat16 : DType::kBFloat16;
  const bool round_trip = (data[0] & 8) != 0;
  // Bit 7: rows 8 times wider, so long-row paths (channel base, fp8 tables) are reached too.
  codec::FieldGeometry g{dtype, data[1], uint64_t{data[2]} * ((data[0] & 0x80) ? 8 : 1)};
  const uint64_t max_rows = data[3];
  const auto payload = fuzz::AsBytes(data + 8, size - 8);
  thread_local codec::Decoder decoder;

  if (!round_trip) {
    if (id == CodecId::kZstd) {
      static constexpr DType kOthers[] = {DType::kBFloat16, DType::kInt64,   DType::kUInt8,
                                          DType::kFloat32,  DType::kFloat64, DType::kInt16,
                                          DType::kBool,     DType::kFloat16};
      g.dtype = kOthers[(data[0] >> 4) & 7];
    }
    DecodeAll(decoder, payload, id, g, max_rows);
    return 0;
  }

  if (g.row_elems == 0) g.row_elems = 1;
  g.rows = std::min<uint64_t>(g.rows, payload.size() / 2 / g.row_elems);
  const auto raw = payload.first(g.elements() * 2);
  codec::EncodeOptions options;
  options.chunk_elems = uint64_t{data[4]} * 8;
  if (data[0] & 0x10) {  // the other entropy coder of each codec
    options.entropy = codec::EntropyCoder::kZstd;
    options.fp8_entropy = codec::EntropyCoder::kHuffman;
  }
  std::vector<std::byte> region;
  if (!codec::Encode(id, g, raw, options, &region).ok()) __builtin_trap();
  std::vector<std::byte> out(raw.size());
  if (!decoder.Decode(region, id, g, UINT64_MAX, out).ok()) __builtin_trap();
  if (!codec::IsLossy(id)) {
    if (!Same(out.data(), raw.data(), raw.size())) __builtin_trap();
  } else {
    std::vector<uint8_t> codes(g.elements());
    std::vector<float> scales(g.rows);
    if (!decoder.DecodeFp8(region, id, g, UINT64_MAX, codes, scales).ok()) __builtin_trap();
    for (uint64_t i = 0; i < g.elements(); ++i) {
      const float y = codec::E4M3ToF32(codes[i]) * scales[i / g.row_elems];
      const uint16_t want = dtype == DType::kBFloat16 ? codec::F32ToBF16(y) : codec::F32ToF16(y);
      const uint16_t got = static_cast<uint16_t>(std::to_integer<uint16_t>(out[2 * i]) |
                                                 (std::to_integer<uint16_t>(out[2 * i + 1]) << 8));
      if (got != want) __builtin_trap();
    }
    if (id == CodecId::kFp8Planes) {  // the same codes and scales as codec 3 (FORMAT.md §4.3.8)
      std::vector<std::byte> plain;
      if (!codec::Encode(CodecId::kFp8, g, raw, options, &plain).ok()) __builtin_trap();
      std::vector<uint8_t> codes3(g.elements());
      std::vector<float> scales3(g.rows);
      if (!decoder.DecodeFp8(plain, CodecId::kFp8, g, UINT64_MAX, codes3, scales3).ok())
        __builtin_trap();
      if (codes3 != codes ||
          !Same(reinterpret_cast<const std::byte*>(scales3.data()),
                reinterpret_cast<const std::byte*>(scales.data()), 4 * scales.size()))
        __builtin_trap();
    }
  }
  std::vector<std::byte> prefix(codec::DecodedBytes(g, max_rows));
  if (!decoder.Decode(region, id, g, max_rows, prefix).ok()) __builtin_trap();
  if (!Same(prefix.data(), out.data(), prefix.size())) __builtin_trap();
  // Row blocks (FORMAT.md §3.10.2): chunks of byte 4 / 8 + 1 rows are the blocks; rows [a, b)
  // decode from the head and the chunks covering them alone, placed from the blocks.
  if (g.rows >= 2) {
    codec::EncodeOptions blocked = options;
    blocked.chunk_rows = std::max<uint64_t>(1, data[4] / 8 + 1);
    std::vector<std::byte> r2;
    if (!codec::Encode(id, g, raw, blocked, &r2).ok()) __builtin_trap();
    std::vector<std::byte> whole(raw.size());
    if (!decoder.Decode(r2, id, g, UINT64_MAX, whole).ok()) __builtin_trap();
    auto blocks = codec::CodedFieldBlocks(r2, id, g);
    if (!blocks.ok()) __builtin_trap();
    if (blocks->block_rows > 0) {
      auto places = codec::PlaceCodedBlocks(id, g, r2.size(), *blocks);
      if (!places.ok()) __builtin_trap();
      const uint64_t a = max_rows % g.rows, b = std::min<uint64_t>(g.rows, a + 1 + data[7] % g.rows);
      const uint64_t c0 = a / blocks->block_rows, c1 = (b - 1) / blocks->block_rows;
      const uint64_t body_at = places->chunk_offset[c0];
      const auto body = std::span<const std::byte>(r2).subspan(
          body_at, places->chunk_offset[c1 + 1] - body_at);
      const uint64_t row_bytes = g.row_elems * DTypeSize(g.dtype);
      std::vector<std::byte> rows((b - a) * row_bytes);
      if (!decoder.DecodeRows(std::span<const std::byte>(r2).first(places->head_size), r2.size(),
                              body, body_at, id, g, a, b, rows)
               .ok())
        __builtin_trap();
      if (!Same(rows.data(), whole.data() + a * row_bytes, rows.size())) __builtin_trap();
      // A forged coded size: refused from the index alone, or by the head read, which no longer
      // agrees with it (what the reader checks, dataset/slice_finish.cc).
      format::FieldBlocks forged = *blocks;
      forged.coded_sizes[data[5] % forged.coded_sizes.size()] += 1 + data[6];
      auto moved = codec::PlaceCodedBlocks(id, g, r2.size(), forged);
      if (moved.ok()) {
        auto info = codec::ParseRegionHead(std::span<const std::byte>(r2).first(moved->head_size),
                                           r2.size(), id, g);
        bool agrees = info.ok() && info->chunks_offset == moved->head_size;
        if (agrees) {
          const auto placed = codec::ChunkPlaces(
              std::span<const std::byte>(r2).first(moved->head_size), *info, g);
          for (size_t c = 0; c < placed.size(); ++c)
            agrees = agrees && placed[c].coded_size == forged.coded_sizes[c];
        }
        if (agrees) __builtin_trap();
      }
    }
  }
  if (!region.empty()) {
    const size_t pos = (data[5] | (data[6] << 8)) % region.size();
    region[pos] ^= std::byte{data[7] == 0 ? uint8_t{1} : data[7]};
    DecodeAll(decoder, region, id, g, max_rows);
  }
  return 0;
}
