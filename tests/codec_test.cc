// Field codecs (FORMAT.md §4.3): bit-exact round trips, prefix decodes, corrupt regions rejected,
// fp8 error bounds.
#include "codec/field_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "codec/codec_table.h"
#include "codec/float8.h"
#include "codec/huffman.h"
#include "codec/plane_kernels.h"
#include "codec/region.h"
#include "format/bytes.h"
#include "format/index_internal.h"

namespace libshard::codec {
namespace {

std::vector<std::byte> ToBytes(const std::vector<uint16_t>& v) {
  std::vector<std::byte> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    b[2 * i] = std::byte{static_cast<uint8_t>(v[i])};
    b[2 * i + 1] = std::byte{static_cast<uint8_t>(v[i] >> 8)};
  }
  return b;
}
std::vector<uint16_t> ToU16(std::span<const std::byte> b) {
  std::vector<uint16_t> v(b.size() / 2);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<uint16_t>(std::to_integer<uint16_t>(b[2 * i]) |
                                 (std::to_integer<uint16_t>(b[2 * i + 1]) << 8));
  return v;
}

// Hidden-state-like bf16/fp16 values: per-channel scales, a few outlier channels, and the
// special values every lossless codec must keep: NaN payloads, ±inf, subnormals, -0.
std::vector<uint16_t> HiddenLike(DType dtype, uint64_t rows, uint64_t cols, uint32_t seed,
                                 bool specials = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> channel_scale(cols);
  for (uint64_t c = 0; c < cols; ++c)
    channel_scale[c] = std::exp2(static_cast<float>(static_cast<int>(rng() % 9)) - 4.0f) *
                       (c % 17 == 3 ? 64.0f : 1.0f);
  std::vector<uint16_t> v(rows * cols);
  for (uint64_t i = 0; i < v.size(); ++i) {
    const float x = normal(rng) * channel_scale[i % cols];
    v[i] = dtype == DType::kBFloat16 ? F32ToBF16(x) : F32ToF16(x);
  }
  if (specials) {
    const uint16_t bf[] = {0x7F81, 0xFFC5, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x007F, 0x8000, 0x0000};
    const uint16_t hf[] = {0x7C01, 0xFE05, 0x7C00, 0xFC00, 0x0001, 0x8001, 0x03FF, 0x8000, 0x0000};
    for (size_t k = 0; k < 9 && k < v.size(); ++k)
      v[(k * 7919) % v.size()] = dtype == DType::kBFloat16 ? bf[k] : hf[k];
  }
  return v;
}

std::vector<std::byte> EncodeOk(CodecId id, const FieldGeometry& g, std::span<const std::byte> raw,
                                EncodeOptions options = {}) {
  std::vector<std::byte> region;
  const Status st = Encode(id, g, raw, options, &region);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return region;
}

std::vector<std::byte> DecodeOk(Decoder& d, std::span<const std::byte> region, CodecId id,
                                const FieldGeometry& g, uint64_t max_rows = UINT64_MAX) {
  std::vector<std::byte> out(DecodedBytes(g, max_rows));
  const Status st = d.Decode(region, id, g, max_rows, out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

TEST(CodecGeometry, RowsAreDimsUpToSeqDim) {
  const uint64_t shape[] = {1, 7, 12};
  auto g = GeometryOf(DType::kBFloat16, shape, 1);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->rows, 7u);
  EXPECT_EQ(g->row_elems, 12u);
  g = GeometryOf(DType::kBFloat16, shape, -1);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->rows, 1u);
  EXPECT_EQ(g->row_elems, 84u);
  g = GeometryOf(DType::kInt64, {}, -1);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->rows, 1u);
  EXPECT_EQ(g->row_elems, 1u);
  EXPECT_FALSE(GeometryOf(DType::kBFloat16, shape, 3).ok());
  const uint64_t huge[] = {uint64_t{1} << 40, uint64_t{1} << 40};
  EXPECT_FALSE(GeometryOf(DType::kBFloat16, huge, 0).ok());
}

struct Shape {
  uint64_t rows, cols;
};

// Every lossless codec, bf16 and fp16, many shapes and chunkings: decoding every prefix gives back
// exactly the first rows of the input, bit for bit.
TEST(CodecLossless, RoundTripsBitExactWithEveryPrefix) {
  const Shape shapes[] = {{0, 16}, {5, 0}, {1, 1},   {1, 4096}, {7, 13}, {33, 100},
                          {3, 577}, {64, 65}, {9, 7}, {11, 9},   {5, 384}};
  const uint64_t chunk_elems[] = {1, 300, 1 << 16};
  Decoder d;
  for (CodecId id : {CodecId::kPlanes, CodecId::kPlanes2, CodecId::kZstd}) {
    for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
      for (const Shape& s : shapes) {
        for (uint64_t ce : chunk_elems) {
          for (int variant = 0; variant < 4; ++variant) {
            const bool base = variant & 1;
            const EntropyCoder entropy = (variant & 2) ? EntropyCoder::kZstd : EntropyCoder::kHuffman;
            SCOPED_TRACE(std::string(CodecName(id)) + " " + std::string(DTypeName(dtype)) + " " +
                         std::to_string(s.rows) + "x" + std::to_string(s.cols) + " chunk_elems " +
                         std::to_string(ce) + " base " + std::to_string(base) + " entropy " +
                         std::to_string(static_cast<int>(entropy)));
            const FieldGeometry g{dtype, s.rows, s.cols};
            const auto raw = ToBytes(HiddenLike(dtype, s.rows, s.cols, 7));
            EncodeOptions o;
            o.chunk_elems = ce;
            o.channel_base = base;
            o.entropy = entropy;
            const auto region = EncodeOk(id, g, raw, o);
            if (s.rows * s.cols == 0) EXPECT_TRUE(region.empty());
            ASSERT_EQ(DecodeOk(d, region, id, g), raw);
            for (uint64_t r = 0; r <= s.rows; ++r) {
              const auto prefix = DecodeOk(d, region, id, g, r);
              ASSERT_EQ(prefix.size(), r * s.cols * 2);
              ASSERT_TRUE(std::equal(prefix.begin(), prefix.end(), raw.begin())) << "rows " << r;
            }
          }
        }
      }
    }
  }
}

TEST(CodecLossless, ZstdTakesEveryDtype) {
  Decoder d;
  std::mt19937 rng(3);
  for (DType dtype : {DType::kBool, DType::kUInt8, DType::kInt64, DType::kInt32, DType::kFloat32,
                      DType::kFloat64, DType::kFloat8E4M3FN}) {
    const FieldGeometry g{dtype, 37, 5};
    std::vector<std::byte> raw(g.elements() * DTypeSize(dtype));
    for (size_t i = 0; i < raw.size(); ++i)
      raw[i] = std::byte{static_cast<uint8_t>(i % 11 == 0 ? rng() : i / 40)};
    EncodeOptions o;
    o.chunk_elems = 20;
    const auto region = EncodeOk(CodecId::kZstd, g, raw, o);
    EXPECT_EQ(DecodeOk(d, region, CodecId::kZstd, g), raw);
    const auto prefix = DecodeOk(d, region, CodecId::kZstd, g, 9);
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), raw.begin()));
  }
}

// Noise does not compress: chunks fall back to stored planes (mode 0) and still round-trip.
TEST(CodecLossless, IncompressiblePlanesAreStored) {
  std::mt19937 rng(11);
  std::vector<uint16_t> v(4000);
  for (auto& x : v) x = static_cast<uint16_t>(rng());
  const FieldGeometry g{DType::kBFloat16, 40, 100};
  const auto raw = ToBytes(v);
  const auto region = EncodeOk(CodecId::kPlanes, g, raw);
  auto info = ParseRegion(region, CodecId::kPlanes, g);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(std::to_integer<uint8_t>(region[kRegionHeaderSize + 4]), 0);  // chunk 0 stored
  Decoder d;
  EXPECT_EQ(DecodeOk(d, region, CodecId::kPlanes, g), raw);
}

TEST(CodecLossless, HiddenLikeDataShrinks) {
  const FieldGeometry g{DType::kBFloat16, 256, 1024};
  const auto raw = ToBytes(HiddenLike(DType::kBFloat16, g.rows, g.row_elems, 5, false));
  const auto region = EncodeOk(CodecId::kPlanes, g, raw);
  // Gaussian values: ~3 bits of sign+exponent and 8 stored bits per value.
  EXPECT_LT(region.size() * 100, raw.size() * 75) << region.size() << " of " << raw.size();
  EXPECT_EQ(std::to_integer<int>(region[kRegionHeaderSize + 4]), 2);  // Huffman-coded (mode 2)
  EncodeOptions zstd;
  zstd.entropy = EntropyCoder::kZstd;
  const auto z = EncodeOk(CodecId::kPlanes, g, raw, zstd);
  EXPECT_EQ(std::to_integer<int>(z[kRegionHeaderSize + 4]), 1);  // zstd (mode 1)
  Decoder d;
  EXPECT_EQ(DecodeOk(d, region, CodecId::kPlanes, g), DecodeOk(d, z, CodecId::kPlanes, g));
}

TEST(CodecLossless, RejectsWrongArguments) {
  std::vector<std::byte> out;
  const FieldGeometry g{DType::kBFloat16, 4, 4};
  std::vector<std::byte> raw(32);
  EXPECT_EQ(Encode(CodecId::kPlanes, g, std::span(raw).first(30), {}, &out).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(CodecId::kPlanes, {DType::kFloat32, 4, 2}, raw, {}, &out).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(static_cast<CodecId>(9), g, raw, {}, &out).code(), StatusCode::kInvalidArgument);
  const auto region = EncodeOk(CodecId::kPlanes, g, raw);
  Decoder d;
  std::vector<std::byte> small(31);
  EXPECT_EQ(d.Decode(region, CodecId::kPlanes, g, UINT64_MAX, small).code(),
            StatusCode::kInvalidArgument);
  // The region must agree with the index: codec, dtype and geometry.
  std::vector<std::byte> full(32);
  EXPECT_EQ(d.Decode(region, CodecId::kZstd, g, UINT64_MAX, full).code(), StatusCode::kCorruption);
  EXPECT_EQ(d.Decode(region, CodecId::kPlanes, {DType::kFloat16, 4, 4}, UINT64_MAX, full).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(d.Decode(region, CodecId::kPlanes, {DType::kBFloat16, 2, 8}, UINT64_MAX, full).code(),
            StatusCode::kCorruption);
}

// The free functions keep per-thread state and a Decoder is one thread's: threads encoding and
// decoding at once get exactly what one thread gets.
TEST(CodecLossless, ThreadsEncodeAndDecodeIndependently) {
  const FieldGeometry g{DType::kBFloat16, 96, 256};
  std::vector<std::vector<std::byte>> raws;
  for (uint32_t t = 0; t < 4; ++t) raws.push_back(ToBytes(HiddenLike(DType::kBFloat16, 96, 256, t)));
  std::vector<std::vector<std::byte>> expected;
  for (const auto& raw : raws) expected.push_back(EncodeOk(CodecId::kPlanes, g, raw, {.chunk_elems = 2048}));
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      Decoder d;
      bool good = true;
      for (int k = 0; k < 20; ++k) {
        std::vector<std::byte> region;
        good &= Encode(CodecId::kPlanes, g, raws[t], {.chunk_elems = 2048}, &region).ok();
        good &= region == expected[t];
        std::vector<std::byte> out(raws[t].size());
        good &= d.Decode(region, CodecId::kPlanes, g, UINT64_MAX, out).ok() && out == raws[t];
      }
      ok[t] = good;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, (std::vector<int>{1, 1, 1, 1}));
}

// A small region with several compressed chunks and a channel base table.
struct Sample {
  CodecId id;
  FieldGeometry g;
  std::vector<std::byte> raw, region;
  size_t table_end;
};
Sample SmallRegion(CodecId id, EntropyCoder entropy = EntropyCoder::kHuffman) {
  Sample s{id, {DType::kBFloat16, 9, 70}, {}, {}, 0};
  s.raw = ToBytes(HiddenLike(DType::kBFloat16, 9, 70, 21, id != CodecId::kFp8Entropy));
  EncodeOptions o;
  o.entropy = o.fp8_entropy = entropy;
  o.chunk_elems = 200;  // 2 rows a chunk: 5 chunks
  s.region = EncodeOk(id, s.g, s.raw, o);
  auto info = ParseRegion(s.region, id, s.g);
  EXPECT_TRUE(info.ok());
  EXPECT_EQ(info->chunk_count, 5u);
  s.table_end = info->chunks_offset;
  return s;
}

// Every single-bit flip: a flip in the header, the chunk table or the channel base table's
// neighbours that changes a size or id is rejected as Corruption; a flip inside a chunk's bytes is
// either rejected (zstd notices) or decodes to other values within the destination's bounds, which
// the sample checksum (xxh3 of the stored bytes, FORMAT.md §3.3) catches. ASan checks the bounds.
TEST(CodecCorruption, EverySingleBitFlipIsRejectedOrBounded) {
  for (int k = 0; k < 10; ++k) {
    const CodecId id = std::array{CodecId::kPlanes,     CodecId::kPlanes,     CodecId::kZstd,
                                  CodecId::kFp8Entropy, CodecId::kFp8Entropy, CodecId::kFp8,
                                  CodecId::kPlanes2,    CodecId::kPlanes2,    CodecId::kFp8Planes,
                                  CodecId::kFp8Planes}[k];
    const EntropyCoder entropy =
        k == 1 || k == 4 || k == 7 || k == 9 ? EntropyCoder::kZstd : EntropyCoder::kHuffman;
    SCOPED_TRACE(std::string(CodecName(id)) + " entropy " + std::to_string(static_cast<int>(entropy)));
    const Sample s = SmallRegion(id, entropy);
    Decoder d;
    const bool has_base = id == CodecId::kPlanes || id == CodecId::kFp8Entropy ||
                          id == CodecId::kPlanes2 || id == CodecId::kFp8Planes;
    const size_t table_only = kRegionHeaderSize + kChunkEntrySize * 5;
    ASSERT_EQ(s.table_end, table_only + (has_base ? s.g.row_elems : 0));
    size_t rejected = 0, decoded = 0;
    for (size_t bit = 0; bit < s.region.size() * 8; ++bit) {
      auto bad = s.region;
      bad[bit / 8] ^= std::byte{static_cast<uint8_t>(1u << (bit % 8))};
      std::vector<std::byte> out(DecodedBytes(s.g, UINT64_MAX));
      const Status st = d.Decode(bad, id, s.g, UINT64_MAX, out);
      if (!st.ok()) {
        ASSERT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
        ++rejected;
      } else {
        ++decoded;
        ASSERT_GE(bit / 8, table_only) << "a flip in the header or chunk table was accepted";
      }
      std::vector<uint8_t> codes(s.g.elements());
      std::vector<float> scales(s.g.rows);
      if (IsLossy(id)) {
        const Status st8 = d.DecodeFp8(bad, id, s.g, UINT64_MAX, codes, scales);
        if (!st8.ok()) ASSERT_EQ(st8.code(), StatusCode::kCorruption);
      }
    }
    EXPECT_GT(rejected, 0u);
    EXPECT_GT(decoded, 0u);  // stored bytes: only the sample checksum can tell
  }
}

TEST(CodecCorruption, EveryTruncationIsRejected) {
  for (int k = 0; k < 10; ++k) {
    const CodecId id = std::array{CodecId::kPlanes,     CodecId::kPlanes,     CodecId::kZstd,
                                  CodecId::kFp8Entropy, CodecId::kFp8Entropy, CodecId::kFp8,
                                  CodecId::kPlanes2,    CodecId::kPlanes2,    CodecId::kFp8Planes,
                                  CodecId::kFp8Planes}[k];
    const EntropyCoder entropy =
        k == 1 || k == 4 || k == 7 || k == 9 ? EntropyCoder::kZstd : EntropyCoder::kHuffman;
    const Sample s = SmallRegion(id, entropy);
    Decoder d;
    for (size_t len = 0; len < s.region.size(); ++len) {
      std::vector<std::byte> cut(s.region.begin(), s.region.begin() + len);
      std::vector<std::byte> out(DecodedBytes(s.g, UINT64_MAX));
      const Status st = d.Decode(cut, id, s.g, UINT64_MAX, out);
      ASSERT_EQ(st.code(), StatusCode::kCorruption) << CodecName(id) << " len " << len;
      EXPECT_NE(st.message().find("codec region"), std::string::npos) << st.message();
    }
    // Trailing bytes are as wrong as missing ones.
    auto longer = s.region;
    longer.push_back(std::byte{0});
    std::vector<std::byte> out(DecodedBytes(s.g, UINT64_MAX));
    EXPECT_EQ(d.Decode(longer, id, s.g, UINT64_MAX, out).code(), StatusCode::kCorruption);
  }
}

TEST(CodecCorruption, NamesWhatIsWrong) {
  Sample s = SmallRegion(CodecId::kPlanes);
  Decoder d;
  std::vector<std::byte> out(DecodedBytes(s.g, UINT64_MAX));
  auto bad = s.region;
  bad[kRegionHeaderSize + kChunkEntrySize * 2 + 4] = std::byte{7};
  Status st = d.Decode(bad, CodecId::kPlanes, s.g, UINT64_MAX, out);
  EXPECT_NE(st.message().find("chunk 2: unknown mode 7"), std::string::npos) << st.message();
  bad = s.region;
  bad[0] = std::byte{'X'};
  st = d.Decode(bad, CodecId::kPlanes, s.g, UINT64_MAX, out);
  EXPECT_NE(st.message().find("bad magic"), std::string::npos) << st.message();
}

// --- Codec 5, planes2 (FORMAT.md §4.3.7) ---------------------------------------------------

// Every 16-bit pattern (NaN payloads, ±inf, subnormals, -0 among them), laid out in rows of odd
// and even widths, with and without the channel base, each entropy coder: bit-exact, every prefix.
TEST(Planes2, EveryBitPatternRoundTrips) {
  Decoder d;
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (uint64_t row_elems : {1, 7, 9, 40, 48, 64, 65, 100, 384}) {
      const uint64_t rows = (65536 + row_elems - 1) / row_elems;
      std::vector<uint16_t> v(rows * row_elems);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(i * 40503u);  // a permutation
      const auto raw = ToBytes(v);
      const FieldGeometry g{dtype, rows, row_elems};
      for (int variant = 0; variant < 4; ++variant) {
        SCOPED_TRACE(std::string(DTypeName(dtype)) + " row_elems " + std::to_string(row_elems) +
                     " variant " + std::to_string(variant));
        EncodeOptions o;
        o.channel_base = variant & 1;
        o.entropy = (variant & 2) ? EntropyCoder::kZstd : EntropyCoder::kHuffman;
        o.chunk_elems = 4096;
        const auto region = EncodeOk(CodecId::kPlanes2, g, raw, o);
        auto info = ParseRegion(region, CodecId::kPlanes2, g);
        ASSERT_TRUE(info.ok()) << info.status().ToString();
        EXPECT_EQ(info->flags, (variant & 1) && row_elems >= 64 ? kFlagChannelBase : 0u);
        ASSERT_EQ(DecodeOk(d, region, CodecId::kPlanes2, g), raw);
        for (uint64_t r : {uint64_t{0}, uint64_t{1}, rows / 3, rows - 1}) {
          const auto prefix = DecodeOk(d, region, CodecId::kPlanes2, g, r);
          ASSERT_TRUE(std::equal(prefix.begin(), prefix.end(), raw.begin())) << "rows " << r;
        }
      }
    }
  }
}

// The fused codec 5 kernel (the AVX2 one where the CPU has it; LIBSHARD_PLANES_KERNEL=sse2 runs
// the baseline) against the formula of §4.3.7, element by element: row widths around its 32- and
// 16-element steps, with and without bases, the output 32-byte aligned (non-temporal stores) or not.
TEST(Planes2, InterleaveSignedMatchesTheFormula) {
  std::mt19937 rng(26);
  auto bytes = [&](size_t n) {
    std::vector<uint8_t> v(n);
    for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
    return v;
  };
  for (size_t row_elems : {1, 8, 15, 16, 17, 31, 32, 33, 40, 48, 63, 64, 65, 96, 100, 384}) {
    const size_t rows = 3, n = rows * row_elems, sign_row = SignRowBytes(row_elems);
    const auto lo = bytes(n), plane = bytes(n), signs = bytes(rows * sign_row),
               base = bytes(row_elems);
    for (bool with_base : {false, true}) {
      for (size_t skew : {0, 2, 16, 32}) {
        SCOPED_TRACE("row_elems " + std::to_string(row_elems) + " base " +
                     std::to_string(with_base) + " skew " + std::to_string(skew));
        alignas(64) static uint8_t out[2 * 3 * 384 + 64];
        std::memset(out, 0xEE, sizeof out);
        InterleaveSigned(lo.data(), plane.data(), signs.data(), with_base ? base.data() : nullptr,
                         row_elems, rows, out + skew);
        for (size_t r = 0; r < rows; ++r)
          for (size_t k = 0; k < row_elems; ++k) {
            const size_t i = r * row_elems + k;
            const uint8_t b = with_base ? base[k] : 0;
            const uint8_t sign = static_cast<uint8_t>(((signs[r * sign_row + k / 8] >> (k % 8)) & 1) << 7);
            ASSERT_EQ(out[skew + 2 * i], lo[i]) << "row " << r << " element " << k;
            ASSERT_EQ(out[skew + 2 * i + 1], static_cast<uint8_t>(((plane[i] + b) & 0x7F) | sign))
                << "row " << r << " element " << k;
          }
        EXPECT_EQ(out[skew + 2 * n], 0xEE) << "wrote past the rows";
      }
    }
  }
}

// Regions written by hand from FORMAT.md §4.3.2, §4.3.6 and §4.3.7 alone (no libshard code makes
// their bytes): each must decode to the values the spec gives, and the writer must write the
// first one (no base table below 64 elements a row, a plane too small to code: mode 0) byte for
// byte.
std::vector<std::byte> Hex(std::string_view hex) {
  std::vector<std::byte> b;
  for (size_t i = 0; i + 1 < hex.size();) {
    if (hex[i] == ' ') {
      ++i;
      continue;
    }
    b.push_back(std::byte{static_cast<uint8_t>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16))});
    i += 2;
  }
  return b;
}

TEST(Planes2, HandWrittenRegionsDecodeAsTheSpecSays) {
  // bfloat16, 2 rows of 3: 1.0, -1.0, a NaN with payload; -0, the smallest subnormal, -inf.
  const std::vector<uint16_t> values = {0x3F80, 0xBF80, 0x7FC1, 0x8000, 0x0001, 0xFF80};
  const FieldGeometry g{DType::kBFloat16, 2, 3};
  const auto stored = Hex(
      "4C534643 05 0B 00 00"            // magic, codec 5, dtype 11 (bfloat16), flags, reserved
      "0200000000000000 0300000000000000"  // rows 2, row_elems 3
      "02000000 01000000"               // chunk_rows 2, chunk_count 1
      "06000000 00 000000"              // chunk 0: coded_size 6, mode 0
      "80 80 C1 00 01 80"               // low bytes
      "02 05"                           // sign bitmaps: row 0 {1}, row 1 {0, 2}
      "3F 3F 7F 00 00 7F");             // hi & 0x7F
  Decoder d;
  EXPECT_EQ(ToU16(DecodeOk(d, stored, CodecId::kPlanes2, g)), values);
  EXPECT_EQ(EncodeOk(CodecId::kPlanes2, g, ToBytes(values)), stored);

  // The same values with a channel base table (flags bit 0) of 0x3F, 0xBF (bit 7 ignored), 0x7F:
  // plane byte = (hi & 0x7F) - (b & 0x7F) mod 128.
  const auto based = Hex(
      "4C534643 05 0B 01 00 0200000000000000 0300000000000000 02000000 01000000"
      "06000000 00 000000"
      "3F BF 7F"                        // channel base table
      "80 80 C1 00 01 80 02 05"
      "00 00 00 41 41 00");
  EXPECT_EQ(ToU16(DecodeOk(d, based, CodecId::kPlanes2, g)), values);
  // Plane bytes of 128 or more (only corruption writes them) are masked to 7 bits.
  auto high = based;
  high[based.size() - 6] = std::byte{0x80};  // reads as 0x00
  EXPECT_EQ(ToU16(DecodeOk(d, high, CodecId::kPlanes2, g)), values);
  // Pad bits of a sign bitmap are ignored.
  auto pad = based;
  pad[based.size() - 8] |= std::byte{0xF8};
  pad[based.size() - 7] |= std::byte{0xF8};
  EXPECT_EQ(ToU16(DecodeOk(d, pad, CodecId::kPlanes2, g)), values);

  // A Huffman plane (mode 2, §4.3.6): float16, 2 rows of 100, element k of row r = (lo k,
  // hi 0x3F with the sign set when k % 3 == r); every plane byte 0x3F, one code of length 1 (an
  // incomplete code), bits all 0: four streams of 50 codes, 7 bytes each.
  const FieldGeometry h{DType::kFloat16, 2, 100};
  std::vector<uint16_t> hv(200);
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 100; ++k)
      hv[r * 100 + k] = static_cast<uint16_t>(k | (0x3F << 8) | (k % 3 == r ? 0x8000 : 0));
  std::vector<std::byte> huff = Hex(
      "4C534643 05 0A 00 00 0200000000000000 6400000000000000 02000000 01000000"
      "A8000000 02 000000");  // coded_size 168 = 128 + 12 + 4 * 7, mode 2
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 100; ++k) huff.push_back(std::byte{static_cast<uint8_t>(k)});
  for (int r = 0; r < 2; ++r)
    for (int byte = 0; byte < 13; ++byte) {  // ceil(100 / 8) bytes a row, pad bits 0
      uint8_t bits = 0;
      for (int j = 0; j < 8 && 8 * byte + j < 100; ++j)
        bits |= static_cast<uint8_t>(((8 * byte + j) % 3 == r) << j);
      huff.push_back(std::byte{bits});
    }
  std::vector<std::byte> lengths(128, std::byte{0});
  lengths[63 / 2] = std::byte{0x10};  // symbol 63 (odd): high nibble, length 1
  huff.insert(huff.end(), lengths.begin(), lengths.end());
  for (const char* size : {"07000000", "07000000", "07000000"}) {
    const auto b = Hex(size);
    huff.insert(huff.end(), b.begin(), b.end());
  }
  huff.resize(huff.size() + 28, std::byte{0});
  EXPECT_EQ(ToU16(DecodeOk(d, huff, CodecId::kPlanes2, h)), hv);
  const auto first = DecodeOk(d, huff, CodecId::kPlanes2, h, 1);
  EXPECT_EQ(ToU16(first), std::vector<uint16_t>(hv.begin(), hv.begin() + 100));
}

// Every header, table and size corruption is a Corruption naming the codec (5 or 6) and, for a
// chunk's, the chunk.
void ExpectCorruptionNamesTheCodecAndTheChunk(CodecId id) {
  // 9 rows of 400, 2 rows a chunk: 5 chunks, each plane (800 bytes) Huffman-coded.
  const FieldGeometry g{DType::kBFloat16, 9, 400};
  const auto raw = ToBytes(HiddenLike(DType::kBFloat16, g.rows, g.row_elems, 4));
  const auto region = EncodeOk(id, g, raw, {.chunk_elems = 800});
  auto info = ParseRegion(region, id, g);
  const std::string name(CodecName(id));
  // Fixed bytes a row: planes2's low bytes and sign bitmap, fp8-planes' scale and nibble row.
  const size_t fixed_row = id == CodecId::kPlanes2 ? 400 + 50 : 4 + 200;
  Decoder ref;
  const auto want = DecodeOk(ref, region, id, g);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_EQ(info->chunk_count, 5u);
  ASSERT_EQ(info->flags, kFlagChannelBase);
  Decoder d;
  std::vector<std::byte> out(DecodedBytes(g, UINT64_MAX));
  auto expect = [&](const std::vector<std::byte>& bad, std::string_view what) {
    const Status st = d.Decode(bad, id, g, UINT64_MAX, out);
    ASSERT_EQ(st.code(), StatusCode::kCorruption) << what;
    EXPECT_NE(st.message().find("codec region (" + name + ")"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
    if (IsLossy(id)) {  // the fp8 API checks the same
      std::vector<uint8_t> codes(g.elements());
      std::vector<float> scales(g.rows);
      const Status st8 = d.DecodeFp8(bad, id, g, UINT64_MAX, codes, scales);
      ASSERT_EQ(st8.code(), StatusCode::kCorruption) << what;
      EXPECT_NE(st8.message().find("codec region (" + name + ")"), std::string::npos);
      EXPECT_NE(st8.message().find(what), std::string::npos) << st8.message();
    }
  };
  const size_t entry2 = kRegionHeaderSize + kChunkEntrySize * 2;
  ASSERT_EQ(std::to_integer<int>(region[entry2 + 4]), 2);  // Huffman-coded
  const uint32_t coded2 = format::GetU32(region.data() + entry2);
  auto bad = region;
  bad[4] = std::byte{2};
  expect(bad, "header names codec 2");
  bad = region;
  bad[4] = std::byte{7};
  expect(bad, "header names codec 7");
  bad = region;
  bad[5] = std::byte{10};
  expect(bad, "header names dtype 10");
  for (size_t at : {6, 7}) {
    bad = region;
    bad[at] = std::byte{2};
    expect(bad, "reserved header bits");
  }
  bad = region;
  bad[8] ^= std::byte{1};
  expect(bad, "rows of");
  bad = region;
  bad[16] ^= std::byte{1};
  expect(bad, "rows of");
  bad = region;
  format::PutU32(bad.data() + 24, 0);
  expect(bad, "chunk_rows 0");
  bad = region;
  format::PutU32(bad.data() + 28, 4);
  expect(bad, "chunk_count 4");
  bad = region;
  bad[entry2 + 4] = std::byte{7};
  expect(bad, "chunk 2: unknown mode 7");
  bad = region;
  bad[entry2 + 5] = std::byte{1};
  expect(bad, "chunk 2: reserved bytes");
  bad = region;
  bad[entry2 + 4] = std::byte{0};  // stored: coded_size must be the plane's 800 bytes
  expect(bad, "chunk 2: stored plane of " + std::to_string(coded2) + " bytes; expected 800");
  bad = region;
  format::PutU32(bad.data() + entry2, 800);  // coded, but not smaller than the plane
  expect(bad, "chunk 2: coded plane of 800 bytes");
  bad = region;
  format::PutU32(bad.data() + entry2, coded2 + 1);
  expect(bad, "chunks end at byte");
  bad = region;
  bad.pop_back();
  expect(bad, "chunks end at byte");
  // A Huffman plane whose stream 0 runs past the plane: the chunk is named.
  size_t at = info->chunks_offset;
  for (int c = 0; c < 2; ++c)
    at += 2 * fixed_row + format::GetU32(region.data() + kRegionHeaderSize + kChunkEntrySize * c);
  at += 2 * fixed_row;  // chunk 2's coded plane
  bad = region;
  format::PutU32(bad.data() + at + 128, 0xFFFF);
  expect(bad, "chunk 2: huffman stream 0 runs past the plane");
  bad = region;
  bad[at] = std::byte{0xCC};  // code lengths above 11 bits
  expect(bad, "chunk 2: huffman code length");
  // Chunks before the damaged one still decode alone (a prefix).
  std::vector<std::byte> prefix(DecodedBytes(g, 4));
  EXPECT_TRUE(d.Decode(bad, id, g, 4, prefix).ok());
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), want.begin()));
}

TEST(Planes2, CorruptionNamesTheCodecAndTheChunk) {
  ExpectCorruptionNamesTheCodecAndTheChunk(CodecId::kPlanes2);
}

// --- Huffman planes ----------------------------------------------------------------------

TEST(Huffman, RoundTripsAnyDistribution) {
  std::mt19937 rng(5);
  std::geometric_distribution<int> geo(0.3);
  for (size_t n : {1, 2, 3, 4, 5, 7, 100, 4097, 100000}) {
    for (int kind = 0; kind < 5; ++kind) {
      std::vector<uint8_t> v(n);
      for (size_t i = 0; i < n; ++i)
        v[i] = kind == 0 ? 42 : kind == 1 ? static_cast<uint8_t>(rng()) :
               kind == 2 ? static_cast<uint8_t>(std::min(geo(rng), 255)) :
               kind == 3 ? static_cast<uint8_t>(rng() % 3) :
               // one stream of the commonest symbol, three of noise: streams finish apart
               (i < n / 4 ? 0 : static_cast<uint8_t>(rng() % 200 == 0 ? 0 : rng()));
      std::vector<std::byte> coded;
      huffman::Encode(v.data(), n, &coded);
      std::vector<uint8_t> out(n);
      const Status st = huffman::Decode(coded.data(), coded.size(), out.data(), n);
      ASSERT_TRUE(st.ok()) << st.ToString() << " n " << n << " kind " << kind;
      ASSERT_EQ(out, v) << "n " << n << " kind " << kind;
      if (kind == 2 && n == 100000) EXPECT_LT(coded.size(), n / 2);  // ~2.2 bits a symbol
    }
  }
}

TEST(Huffman, CorruptStreamsAreRejectedOrBounded) {
  std::mt19937 rng(6);
  std::geometric_distribution<int> geo(0.4);
  std::vector<uint8_t> v(300);
  for (auto& x : v) x = static_cast<uint8_t>(std::min(geo(rng), 255));
  std::vector<std::byte> coded;
  huffman::Encode(v.data(), v.size(), &coded);
  std::vector<uint8_t> out(v.size());
  for (size_t len = 0; len < coded.size(); ++len)
    EXPECT_FALSE(huffman::Decode(coded.data(), len, out.data(), out.size()).ok()) << len;
  for (size_t bit = 0; bit < coded.size() * 8; ++bit) {
    auto bad = coded;
    bad[bit / 8] ^= std::byte{static_cast<uint8_t>(1u << (bit % 8))};
    const Status st = huffman::Decode(bad.data(), bad.size(), out.data(), out.size());
    if (!st.ok()) EXPECT_EQ(st.code(), StatusCode::kCorruption);
  }
}

// FORMAT.md §4.3.6 read literally, one bit at a time: the reference the table-driven decoder
// must agree with on every input (same verdict; the same symbols when it accepts).
bool ReferenceHuffmanDecode(const std::vector<std::byte>& coded, std::vector<uint8_t>* out) {
  if (coded.size() < huffman::kHeaderSize) return false;
  int len[256];
  for (int k = 0; k < 128; ++k) {
    len[2 * k] = std::to_integer<int>(coded[k]) & 0xF;
    len[2 * k + 1] = std::to_integer<int>(coded[k]) >> 4;
  }
  uint64_t kraft = 0;
  for (int s = 0; s < 256; ++s) {
    if (len[s] > 11) return false;
    if (len[s] > 0) kraft += uint64_t{1} << (11 - len[s]);
  }
  if (kraft > 2048) return false;
  // Canonical codes: (length, symbol) order, shorter first.
  std::vector<std::pair<int, int>> order;
  for (int s = 0; s < 256; ++s)
    if (len[s] > 0) order.push_back({len[s], s});
  std::sort(order.begin(), order.end());
  std::vector<std::array<uint32_t, 3>> codes;  // code, length, symbol
  uint32_t code = 0;
  int prev = 0;
  for (auto [l, s] : order) {
    code <<= (l - prev);
    prev = l;
    codes.push_back({code++, static_cast<uint32_t>(l), static_cast<uint32_t>(s)});
  }
  const size_t n = out->size(), q = (n + 3) / 4;
  size_t offset = huffman::kHeaderSize;
  for (int k = 0; k < 4; ++k) {
    if (offset > coded.size()) return false;
    const size_t sz = k < 3 ? format::GetU32(coded.data() + 128 + 4 * k) : coded.size() - offset;
    if (sz > coded.size() - offset) return false;
    uint64_t bit = 0;
    auto next_bit = [&](uint32_t* b) {
      if (bit >= sz * 8) return false;
      *b = (std::to_integer<uint32_t>(coded[offset + bit / 8]) >> (bit % 8)) & 1;
      ++bit;
      return true;
    };
    for (size_t i = std::min(n, k * q); i < std::min(n, (k + 1) * q); ++i) {
      uint32_t c = 0, b = 0;
      int l = 0;
      bool found = false;
      while (!found && l < 11) {
        if (!next_bit(&b)) return false;
        c = (c << 1) | b;
        ++l;
        for (const auto& e : codes)
          if (e[1] == static_cast<uint32_t>(l) && e[0] == c) {
            (*out)[i] = static_cast<uint8_t>(e[2]);
            found = true;
          }
      }
      if (!found) (*out)[i] = 0;  // an unassigned 11-bit pattern reads as symbol 0
    }
    if ((bit + 7) / 8 != sz) return false;
    offset += sz;
  }
  return true;
}

TEST(Huffman, AgreesWithTheSpecOnArbitraryInput) {
  std::mt19937 rng(7);
  std::geometric_distribution<int> geo(0.35);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t n = 1 + rng() % (trial % 3 == 0 ? 2000 : 120);
    std::vector<uint8_t> v(n);
    for (auto& x : v) x = static_cast<uint8_t>(std::min(geo(rng), 255));
    std::vector<std::byte> coded;
    huffman::Encode(v.data(), n, &coded);
    // Damage some: flip bits in the streams, change a length or a stream size, cut or extend.
    switch (trial % 6) {
      case 1: coded[huffman::kHeaderSize + rng() % (coded.size() - huffman::kHeaderSize)] ^=
                  std::byte{static_cast<uint8_t>(1u << (rng() % 8))}; break;
      case 2: coded[rng() % 128] ^= std::byte{static_cast<uint8_t>(rng())}; break;
      case 3: coded[128 + rng() % 12] ^= std::byte{static_cast<uint8_t>(1u << (rng() % 8))}; break;
      case 4: coded.resize(coded.size() - 1 - rng() % std::min<size_t>(coded.size(), 20)); break;
      case 5: for (int k = 0; k < 9; ++k) coded.push_back(std::byte{static_cast<uint8_t>(rng())}); break;
      default: break;
    }
    std::vector<uint8_t> ref(n), got(n);
    const bool ok = ReferenceHuffmanDecode(coded, &ref);
    const Status st = huffman::Decode(coded.data(), coded.size(), got.data(), n);
    ASSERT_EQ(st.ok(), ok) << "trial " << trial << ": " << st.ToString();
    if (!ok) {
      EXPECT_EQ(st.code(), StatusCode::kCorruption);
      continue;
    }
    ++accepted;
    ASSERT_EQ(got, ref) << "trial " << trial;
    if (trial % 6 == 0) ASSERT_EQ(got, v) << "trial " << trial;
  }
  EXPECT_GT(accepted, 500);
}

// The decode table's variants (window 11 or 12 bits, runs of 6 or 7 symbols) read the same
// bytes: the same verdict and symbols as the spec's reference on every input.
TEST(Huffman, EveryDecoderVariantAgreesWithTheSpec) {
  std::mt19937 rng(8);
  int accepted = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    // Low-entropy planes (exponent-like: most codes 1-3 bits) and wider ones.
    std::geometric_distribution<int> geo(trial % 2 ? 0.6 : 0.2);
    const size_t n = 1 + rng() % (trial % 4 == 0 ? 5000 : 200);
    std::vector<uint8_t> v(n);
    for (auto& x : v) x = static_cast<uint8_t>(std::min(geo(rng), 255));
    std::vector<std::byte> coded;
    huffman::Encode(v.data(), n, &coded);
    switch (trial % 5) {
      case 1: coded[huffman::kHeaderSize + rng() % (coded.size() - huffman::kHeaderSize)] ^=
                  std::byte{static_cast<uint8_t>(1u << (rng() % 8))}; break;
      case 2: coded[rng() % 128] ^= std::byte{static_cast<uint8_t>(rng())}; break;
      case 3: coded.resize(coded.size() - 1 - rng() % std::min<size_t>(coded.size(), 20)); break;
      default: break;
    }
    std::vector<uint8_t> ref(n);
    const bool ok = ReferenceHuffmanDecode(coded, &ref);
    accepted += ok;
    for (auto variant : {huffman::DecoderVariant::kWindow11Run6, huffman::DecoderVariant::kWindow11Run7,
                         huffman::DecoderVariant::kWindow12Run6, huffman::DecoderVariant::kWindow12Run7}) {
      std::vector<uint8_t> got(n);
      const Status st = huffman::DecodeVariant(variant, coded.data(), coded.size(), got.data(), n);
      ASSERT_EQ(st.ok(), ok) << "trial " << trial << " variant " << static_cast<int>(variant)
                             << ": " << st.ToString();
      if (!ok) {
        EXPECT_EQ(st.code(), StatusCode::kCorruption);
        continue;
      }
      ASSERT_EQ(got, ref) << "trial " << trial << " variant " << static_cast<int>(variant);
      if (trial % 5 == 0) ASSERT_EQ(got, v) << "trial " << trial;
    }
  }
  EXPECT_GT(accepted, 500);
}

// --- fp8 ------------------------------------------------------------------------------------

TEST(Float8, E4M3RoundsToNearestEvenAndSaturates) {
  // Every finite code converts back to itself.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(F32ToE4M3(E4M3ToF32(static_cast<uint8_t>(c))), c) << c;
  }
  // Midpoints between neighbours round to the even code.
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = E4M3ToF32(static_cast<uint8_t>(c)), hi = E4M3ToF32(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;
    EXPECT_EQ(F32ToE4M3(mid), (c % 2 == 0) ? c : c + 1) << c;
    EXPECT_EQ(F32ToE4M3(std::nextafter(mid, 0.0f)), c);
    EXPECT_EQ(F32ToE4M3(std::nextafter(mid, 1000.0f)), c + 1);
  }
  EXPECT_EQ(F32ToE4M3(448.0f), 0x7E);
  EXPECT_EQ(F32ToE4M3(470.0f), 0x7E);
  EXPECT_EQ(F32ToE4M3(1e30f), 0x7E);
  EXPECT_EQ(F32ToE4M3(-1e30f), 0xFE);
  EXPECT_EQ(F32ToE4M3(INFINITY), 0x7F);
  EXPECT_EQ(F32ToE4M3(-INFINITY), 0xFF);
  EXPECT_EQ(F32ToE4M3(NAN), 0x7F);
  EXPECT_EQ(F32ToE4M3(-0.0f), 0x80);
  EXPECT_EQ(F32ToE4M3(0x1p-10f), 0x00);  // tie between 0 and 2^-9: even
  EXPECT_EQ(F32ToE4M3(0x1.8p-9f), 0x02);  // tie between 1 and 2 (·2^-9): even
}

TEST(Float8, HalfConversionsRoundToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBF16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(F32ToBF16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(F32ToBF16(-NAN) & 0x7FFF, 0x7FC0);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;  // NaN
    EXPECT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(F32ToF16(70000.0f), 0x7C00);
}

// Per element, for finite x in a row of absmax A, scale s = A/448 (float32):
//   |dequant(x) - x| ≤ 2^-4·|x| (e4m3 has 3 mantissa bits) or 2^-10·s below e4m3's normal range,
//   plus 2^-8·|result| for the final rounding to bfloat16 (2^-11 for float16),
// and a few float32 roundings (bounded here by 2^-20 relative).
double Fp8Bound(double x, double s, DType dtype) {
  const double out_round = dtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
  const double q_err = std::max(0x1p-4 * std::fabs(x), 0x1p-10 * s);
  const double fp16_sub = dtype == DType::kFloat16 ? 0x1p-25 : 0.0;  // float16 subnormal step / 2
  return (q_err + out_round * (std::fabs(x) + q_err)) * (1 + 0x1p-20) + fp16_sub;
}

TEST(Fp8, ErrorWithinTheBoundOfE4M3AndTheRowScale) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (CodecId id : {CodecId::kFp8, CodecId::kFp8Entropy, CodecId::kFp8Planes}) {
     for (uint64_t cols : {100, 300, 600}) {  // short rows convert per element, long ones by table
      const FieldGeometry g{dtype, 40, cols};
      const auto v = HiddenLike(dtype, g.rows, g.row_elems, 17, false);
      const auto raw = ToBytes(v);
      EncodeOptions o;
      o.chunk_elems = 1000;
      const auto region = EncodeOk(id, g, raw, o);
      Decoder d;
      const auto out = ToU16(DecodeOk(d, region, id, g));
      std::vector<uint8_t> codes(g.elements());
      std::vector<float> scales(g.rows);
      ASSERT_TRUE(d.DecodeFp8(region, id, g, UINT64_MAX, codes, scales).ok());
      auto to_f = [&](uint16_t h) { return dtype == DType::kBFloat16 ? BF16ToF32(h) : F16ToF32(h); };
      double max_rel = 0;
      for (uint64_t r = 0; r < g.rows; ++r) {
        float absmax = 0;
        for (uint64_t c = 0; c < g.row_elems; ++c)
          absmax = std::max(absmax, std::fabs(to_f(v[r * g.row_elems + c])));
        ASSERT_EQ(scales[r], absmax / 448.0f);
        for (uint64_t c = 0; c < g.row_elems; ++c) {
          const uint64_t i = r * g.row_elems + c;
          const double x = to_f(v[i]), y = to_f(out[i]);
          ASSERT_LE(std::fabs(y - x), Fp8Bound(x, scales[r], dtype))
              << "row " << r << " col " << c << " x " << x << " y " << y;
          // The codes the fp8 API hands out dequantize to exactly what Decode returns.
          const float deq = E4M3ToF32(codes[i]) * scales[r];
          ASSERT_EQ(out[i], dtype == DType::kBFloat16 ? F32ToBF16(deq) : F32ToF16(deq));
          if (std::fabs(x) >= 0x1p-6 * scales[r]) max_rel = std::max(max_rel, std::fabs(y - x) / std::fabs(x));
        }
      }
      EXPECT_LE(max_rel, 0x1p-4 + 0x1p-7);
      EXPECT_GT(max_rel, 0.01);  // it is lossy: the bound is not vacuous
     }
    }
  }
}

TEST(Fp8, EntropyVariantDecodesToTheSameValuesAndIsSmaller) {
  const FieldGeometry g{DType::kBFloat16, 64, 512};
  const auto raw = ToBytes(HiddenLike(DType::kBFloat16, g.rows, g.row_elems, 9, false));
  const auto plain = EncodeOk(CodecId::kFp8, g, raw);
  const auto entropy = EncodeOk(CodecId::kFp8Entropy, g, raw);
  Decoder d;
  EXPECT_EQ(DecodeOk(d, plain, CodecId::kFp8, g), DecodeOk(d, entropy, CodecId::kFp8Entropy, g));
  EXPECT_LT(entropy.size(), plain.size());
  EXPECT_LE(plain.size(), raw.size() / 2 + kRegionHeaderSize + 8 * 64 + 4 * 64);
  for (uint64_t r = 0; r <= g.rows; r += 7) {
    const auto a = DecodeOk(d, entropy, CodecId::kFp8Entropy, g, r);
    const auto full = DecodeOk(d, entropy, CodecId::kFp8Entropy, g);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), full.begin()));
  }
}

// The row's absmax maps to 448 exactly (code 0x7E) and dequantizes to itself; an all-zero row has
// scale 0 and decodes to zeros with their signs; NaN and ±inf become NaN (e4m3fn has no infinity)
// and do not count toward the absmax of the row.
TEST(Fp8, SaturationZerosAndNonFinite) {
  const FieldGeometry g{DType::kBFloat16, 3, 4};
  const std::vector<uint16_t> v = {
      F32ToBF16(3.0f), F32ToBF16(-7.0f), F32ToBF16(1.5f), F32ToBF16(0.0f),  // absmax 7
      0x0000, 0x8000, 0x0000, 0x8000,                                          // all zero
      0x7F80, 0xFF80, 0x7FC1, F32ToBF16(-2.0f)};                               // inf, -inf, NaN
  Decoder d;
  const auto region = EncodeOk(CodecId::kFp8, g, ToBytes(v));
  std::vector<uint8_t> codes(12);
  std::vector<float> scales(3);
  ASSERT_TRUE(d.DecodeFp8(region, CodecId::kFp8, g, UINT64_MAX, codes, scales).ok());
  EXPECT_EQ(scales[0], 7.0f / 448.0f);
  EXPECT_EQ(codes[1], 0xFE);  // -absmax saturates exactly at -448
  EXPECT_EQ(scales[1], 0.0f);
  EXPECT_EQ(scales[2], 2.0f / 448.0f);
  EXPECT_EQ(codes[8], 0x7F);
  EXPECT_EQ(codes[9], 0xFF);
  EXPECT_EQ(codes[10] & 0x7F, 0x7F);
  const auto out = ToU16(DecodeOk(d, region, CodecId::kFp8, g));
  EXPECT_EQ(out[1], F32ToBF16(-7.0f));
  EXPECT_EQ(out[0], F32ToBF16(3.0f));
  EXPECT_EQ(out[3], 0x0000);
  EXPECT_EQ((std::vector<uint16_t>(out.begin() + 4, out.begin() + 8)),
            (std::vector<uint16_t>{0x0000, 0x8000, 0x0000, 0x8000}));
  EXPECT_EQ(out[8], 0x7FC0);
  EXPECT_EQ(out[9], 0xFFC0);
  EXPECT_TRUE(std::isnan(BF16ToF32(out[10])));
  EXPECT_EQ(out[11], F32ToBF16(-2.0f));
}

TEST(Fp8, EveryCodeDequantizesAsTheSpecSays) {
  // Rows of 256 elements, one per code (the NaN codes from NaN inputs): row 0 at scale 1, the
  // others scaled, so the per-row tables see every code at several scales.
  const FieldGeometry g{DType::kBFloat16, 6, 256};
  std::vector<uint16_t> v(g.elements());
  const float factors[] = {1.0f, 3.0f, 0x1p-20f, 1e30f, 0.7f, -5.5f};
  for (uint64_t r = 0; r < g.rows; ++r)
    for (int c = 0; c < 256; ++c) {
      const float x = (c & 0x7F) == 0x7F ? (c & 0x80 ? -NAN : NAN)
                                         : E4M3ToF32(static_cast<uint8_t>(c)) * factors[r];
      v[r * 256 + c] = F32ToBF16(x);
    }
  for (CodecId id : {CodecId::kFp8, CodecId::kFp8Entropy, CodecId::kFp8Planes}) {
    const auto region = EncodeOk(id, g, ToBytes(v), EncodeOptions{});
    Decoder d;
    const auto out = ToU16(DecodeOk(d, region, id, g));
    std::vector<uint8_t> codes(g.elements());
    std::vector<float> scales(g.rows);
    ASSERT_TRUE(d.DecodeFp8(region, id, g, UINT64_MAX, codes, scales).ok());
    std::vector<bool> seen(256);
    for (uint64_t i = 0; i < g.elements(); ++i) {
      if (i < 256) seen[codes[i]] = true;
      ASSERT_EQ(out[i], F32ToBF16(E4M3ToF32(codes[i]) * scales[i / 256])) << i;
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 256);
  }
}

// The fast fp8 dequantization (16-entry tables per row, AVX2; issue 26) against the 256-entry
// table path and the formula of §4.3.5, bit for bit: every code, both dtypes, scales over the
// whole float32 range (every exponent field, several mantissas, both signs) and at the edges
// where a row stops qualifying; codecs 3/4 (with and without bases) and codec 6's fused kernel;
// row widths around the 32-element step. Where the CPU lacks AVX2 (or LIBSHARD_PLANES_KERNEL=sse2)
// both sides run the table path and this still checks it against the formula.
TEST(Fp8, FastDequantizationMatchesTheTablePath) {
  std::mt19937 rng(26);
  std::vector<float> scales = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f,
                               0x1p-120f, 0x1p-8f, 65520.0f / 448.0f, 65504.0f / 448.0f,
                               std::numeric_limits<float>::max() / 448.0f,
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::denorm_min(), 1.0f / 1.875f,
                               2.0f / 1.875f, 2.0f / 1.75f};
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t mant : {0u, 1u, 0x400000u, 0x7FFFFFu, 0x7FFFFEu, 0x444444u, 0x088888u,
                          static_cast<uint32_t>(rng()) & 0x7FFFFFu,
                          static_cast<uint32_t>(rng()) & 0x7FFFFFu})
      for (uint32_t sign : {0u, 0x80000000u})
        scales.push_back(std::bit_cast<float>(sign | e << 23 | mant));
  // A few ulps either side of every bound and of the scales that carry products into the next
  // binade.
  for (float edge : {0x1p-120f, 0x1p-8f, 65520.0f / 448.0f, 65504.0f / 448.0f,
                     std::numeric_limits<float>::max() / 448.0f, 1.0f / 1.875f, 2.0f / 1.875f,
                     2.0f / 1.125f, 0x1p-126f}) {
    float lo = edge, hi = edge;
    for (int k = 0; k < 8; ++k) {
      lo = std::nextafter(lo, 0.0f);
      hi = std::nextafter(hi, INFINITY);
      scales.insert(scales.end(), {lo, hi, -lo, -hi});
    }
  }
  std::vector<uint8_t> all(256);
  for (int c = 0; c < 256; ++c) all[c] = static_cast<uint8_t>(c);
  const auto base = [&] {
    std::vector<uint8_t> b(384);
    for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
    return b;
  }();
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    const bool bf16 = dtype == DType::kBFloat16;
    for (float s : scales) {
      SCOPED_TRACE("scale " + std::to_string(std::bit_cast<uint32_t>(s)) + " bf16 " +
                   std::to_string(bf16));
      std::vector<uint16_t> fast(256), table(256);
      DequantizeRow(all.data(), nullptr, 256, s, dtype, reinterpret_cast<uint8_t*>(fast.data()));
      DequantizeRow(all.data(), nullptr, 256, s, dtype, reinterpret_cast<uint8_t*>(table.data()),
                    Fp8Kernel::kTable);
      for (int c = 0; c < 256; ++c) {
        const float y = E4M3ToF32(static_cast<uint8_t>(c)) * s;
        ASSERT_EQ(table[c], bf16 ? F32ToBF16(y) : F32ToF16(y)) << "code " << c;
        ASSERT_EQ(fast[c], table[c]) << "code " << c;
      }
    }
    // Row widths around the steps, random codes (all 256 in the 384 row), bases, codec 6.
    for (size_t n : {1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 384}) {
      std::vector<uint8_t> q(n);
      for (size_t i = 0; i < n; ++i) q[i] = n == 384 && i < 256 ? static_cast<uint8_t>(i) : rng();
      for (float s : {1.0f, -3.5f, 0.013f, 1e-3f, 1e30f, 0x1p-125f, 150.0f}) {
        for (bool with_base : {false, true}) {
          SCOPED_TRACE("n " + std::to_string(n) + " scale " + std::to_string(s) + " base " +
                       std::to_string(with_base));
          const uint8_t* b = with_base ? base.data() : nullptr;
          std::vector<uint16_t> fast(n + 1, 0xEEEE), table(n + 1, 0xEEEE), planes(n + 1, 0xEEEE);
          DequantizeRow(q.data(), b, n, s, dtype, reinterpret_cast<uint8_t*>(fast.data()));
          DequantizeRow(q.data(), b, n, s, dtype, reinterpret_cast<uint8_t*>(table.data()),
                        Fp8Kernel::kTable);
          EXPECT_EQ(fast, table);
          // Codec 6: the same codes split into nibbles and plane (bases as §4.3.8's).
          std::vector<uint8_t> codes(q);
          if (with_base) ApplyBase(codes.data(), base.data(), n, true);
          std::vector<uint8_t> nibbles(NibbleRowBytes(n) + 16), plane(n);
          SplitFp8Planes(codes.data(), b, n, nibbles.data(), plane.data());
          DequantizeFp8PlanesRow(nibbles.data(), plane.data(), b, n, s, dtype,
                                 reinterpret_cast<uint8_t*>(planes.data()));
          EXPECT_EQ(planes, table);
          std::vector<uint16_t> planes_table(n + 1, 0xEEEE);
          DequantizeFp8PlanesRow(nibbles.data(), plane.data(), b, n, s, dtype,
                                 reinterpret_cast<uint8_t*>(planes_table.data()), Fp8Kernel::kTable);
          EXPECT_EQ(planes_table, table);
        }
      }
    }
  }
}

// Through the codecs, float16 and bfloat16, rows whose scales span the range (most float16 rows
// below 2^-8 · 448 take the table path, the others the fast one): every value as §4.3.5 says.
TEST(Fp8, EveryDtypeAndScaleDecodesAsTheFormula) {
  std::mt19937 rng(7);
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    const bool bf16 = dtype == DType::kBFloat16;
    const float factors[] = {1.0f, 3.0f, 0x1p-10f, 0x1p-14f, 0.7f, -5.5f, 100.0f, 146.0f, 0.25f,
                             bf16 ? 1e30f : 0x1p-20f, bf16 ? 0x1p-120f : 0.01f};
    const FieldGeometry g{dtype, std::size(factors), 384};
    std::vector<uint16_t> v(g.elements());
    for (uint64_t r = 0; r < g.rows; ++r)
      for (uint64_t k = 0; k < g.row_elems; ++k) {
        const int c = k < 256 ? static_cast<int>(k) : static_cast<int>(rng() & 0xFF);
        const float x = (c & 0x7F) == 0x7F ? (c & 0x80 ? -NAN : NAN)
                                           : E4M3ToF32(static_cast<uint8_t>(c)) * factors[r];
        v[r * g.row_elems + k] = bf16 ? F32ToBF16(x) : F32ToF16(x);
      }
    for (CodecId id : {CodecId::kFp8, CodecId::kFp8Entropy, CodecId::kFp8Planes}) {
      const auto region = EncodeOk(id, g, ToBytes(v), EncodeOptions{});
      Decoder d;
      const auto out = ToU16(DecodeOk(d, region, id, g));
      std::vector<uint8_t> codes(g.elements());
      std::vector<float> scales(g.rows);
      ASSERT_TRUE(d.DecodeFp8(region, id, g, UINT64_MAX, codes, scales).ok());
      for (uint64_t i = 0; i < g.elements(); ++i) {
        const float y = E4M3ToF32(codes[i]) * scales[i / g.row_elems];
        ASSERT_EQ(out[i], bf16 ? F32ToBF16(y) : F32ToF16(y)) << i;
      }
    }
  }
}

// --- Codec 6, fp8-planes (FORMAT.md §4.3.8) ------------------------------------------------

// The same codes and scales as codec 3 (so the same decoded values, bit for bit), for odd and
// even row widths, with and without a channel base, Huffman or zstd planes, every prefix; the
// inputs carry NaN payloads, ±inf, subnormals and -0.
TEST(Fp8Planes, SameCodesScalesAndValuesAsFp8) {
  Decoder d;
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (uint64_t cols : {1, 3, 7, 9, 65, 384}) {
      for (uint64_t rows : {1, 5, 19}) {
        const FieldGeometry g{dtype, rows, cols};
        const auto raw = ToBytes(HiddenLike(dtype, rows, cols, static_cast<uint32_t>(cols + rows)));
        const auto plain = EncodeOk(CodecId::kFp8, g, raw);
        const auto want = DecodeOk(d, plain, CodecId::kFp8, g);
        std::vector<uint8_t> want_codes(g.elements()), codes(g.elements());
        std::vector<float> want_scales(rows), scales(rows);
        ASSERT_TRUE(d.DecodeFp8(plain, CodecId::kFp8, g, UINT64_MAX, want_codes, want_scales).ok());
        for (uint64_t ce : {1, 300, 1 << 16}) {
          for (int variant = 0; variant < 4; ++variant) {
            EncodeOptions o;
            o.chunk_elems = ce;
            o.channel_base = variant & 1;
            o.entropy = (variant & 2) ? EntropyCoder::kZstd : EntropyCoder::kHuffman;
            SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + std::to_string(rows) + "x" +
                         std::to_string(cols) + " chunk_elems " + std::to_string(ce) +
                         " variant " + std::to_string(variant));
            const auto region = EncodeOk(CodecId::kFp8Planes, g, raw, o);
            auto info = ParseRegion(region, CodecId::kFp8Planes, g);
            ASSERT_TRUE(info.ok()) << info.status().ToString();
            EXPECT_EQ(info->flags, (variant & 1) && cols >= 64 ? kFlagChannelBase : 0u);
            ASSERT_EQ(DecodeOk(d, region, CodecId::kFp8Planes, g), want);
            ASSERT_TRUE(d.DecodeFp8(region, CodecId::kFp8Planes, g, UINT64_MAX, codes, scales).ok());
            ASSERT_EQ(codes, want_codes);
            ASSERT_EQ(std::memcmp(scales.data(), want_scales.data(), 4 * rows), 0);
            for (uint64_t r = 0; r <= rows; ++r) {
              const auto prefix = DecodeOk(d, region, CodecId::kFp8Planes, g, r);
              ASSERT_EQ(prefix.size(), r * cols * 2);
              ASSERT_TRUE(std::equal(prefix.begin(), prefix.end(), want.begin())) << "rows " << r;
              std::vector<uint8_t> pc(r * cols);
              std::vector<float> ps(r);
              ASSERT_TRUE(d.DecodeFp8(region, CodecId::kFp8Planes, g, r, pc, ps).ok());
              ASSERT_TRUE(std::equal(pc.begin(), pc.end(), want_codes.begin())) << "rows " << r;
            }
          }
        }
      }
    }
  }
}

TEST(Fp8Planes, HiddenStatesShrinkAndCodeWithHuffman) {
  const FieldGeometry g{DType::kBFloat16, 64, 512};
  const auto raw = ToBytes(HiddenLike(DType::kBFloat16, g.rows, g.row_elems, 9, false));
  const auto plain = EncodeOk(CodecId::kFp8, g, raw);
  const auto planes = EncodeOk(CodecId::kFp8Planes, g, raw);
  Decoder d;
  EXPECT_EQ(DecodeOk(d, plain, CodecId::kFp8, g), DecodeOk(d, planes, CodecId::kFp8Planes, g));
  // 4 stored bits a value and ~2-3 coded ones, against codec 3's 8.
  EXPECT_LT(planes.size() * 100, plain.size() * 90) << planes.size() << " of " << plain.size();
  EXPECT_EQ(std::to_integer<int>(planes[kRegionHeaderSize + 4]), 2);  // Huffman-coded (mode 2)
}

TEST(Fp8Planes, HandWrittenRegionsDecodeAsTheSpecSays) {
  // bfloat16, 2 rows of 3, each row's absmax 448 (scale 1.0): 448, -1, a NaN with payload; -0,
  // 2^-9 (e4m3's smallest subnormal), -448. Codes 7E B8 7F; 80 01 FE.
  const std::vector<uint16_t> values = {0x43E0, 0xBF80, 0x7FC1, 0x8000, 0x3B00, 0xC3E0};
  const std::vector<uint16_t> decoded = {0x43E0, 0xBF80, 0x7FC0, 0x8000, 0x3B00, 0xC3E0};
  const std::vector<uint8_t> want_codes = {0x7E, 0xB8, 0x7F, 0x80, 0x01, 0xFE};
  const FieldGeometry g{DType::kBFloat16, 2, 3};
  const auto stored = Hex(
      "4C534643 06 0B 00 00"               // magic, codec 6, dtype 11 (bfloat16), flags, reserved
      "0200000000000000 0300000000000000"  // rows 2, row_elems 3
      "02000000 01000000"                  // chunk_rows 2, chunk_count 1
      "06000000 00 000000"                 // chunk 0: coded_size 6, mode 0
      "0000803F 0000803F"                  // row scales 1.0, 1.0
      "86 07"                              // row 0 nibbles: 6 (7E), 8 (B8); 7 (7F), pad 0
      "18 0E"                              // row 1 nibbles: 8 (80), 1 (01); E (FE), pad 0
      "0F 07 0F 00 00 0F");                // exponent fields
  Decoder d;
  EXPECT_EQ(ToU16(DecodeOk(d, stored, CodecId::kFp8Planes, g)), decoded);
  EXPECT_EQ(EncodeOk(CodecId::kFp8Planes, g, ToBytes(values)), stored);
  std::vector<uint8_t> codes(6);
  std::vector<float> scales(2);
  ASSERT_TRUE(d.DecodeFp8(stored, CodecId::kFp8Planes, g, UINT64_MAX, codes, scales).ok());
  EXPECT_EQ(codes, want_codes);
  EXPECT_EQ(scales, (std::vector<float>{1.0f, 1.0f}));
  const auto first = DecodeOk(d, stored, CodecId::kFp8Planes, g, 1);
  EXPECT_EQ(ToU16(first), std::vector<uint16_t>(decoded.begin(), decoded.begin() + 3));

  // With a channel base table (flags bit 0) of 0x0F, 0xF7, 0x3F (bits 4-7 ignored): plane byte =
  // exponent field - (b & 0x0F) mod 16.
  const auto based = Hex(
      "4C534643 06 0B 01 00 0200000000000000 0300000000000000 02000000 01000000"
      "06000000 00 000000"
      "0F F7 3F"                           // channel base table
      "0000803F 0000803F 86 07 18 0E"
      "00 00 00 01 09 00");
  EXPECT_EQ(ToU16(DecodeOk(d, based, CodecId::kFp8Planes, g)), decoded);
  ASSERT_TRUE(d.DecodeFp8(based, CodecId::kFp8Planes, g, UINT64_MAX, codes, scales).ok());
  EXPECT_EQ(codes, want_codes);
  // Plane bytes of 16 or more (only corruption writes them) are masked to 4 bits.
  auto high = based;
  high[based.size() - 6] = std::byte{0xF0};  // reads as 0x00
  EXPECT_EQ(ToU16(DecodeOk(d, high, CodecId::kFp8Planes, g)), decoded);
  // The pad nibble of an odd row is ignored.
  auto pad = based;
  pad[based.size() - 9] |= std::byte{0xF0};
  pad[based.size() - 7] |= std::byte{0xF0};
  EXPECT_EQ(ToU16(DecodeOk(d, pad, CodecId::kFp8Planes, g)), decoded);
}

// Every plane byte and nibble byte value decodes as §4.3.8's formula says (the SSE2 kernel and the
// scalar tail alike), with and without a base table.
TEST(Fp8Planes, AnyBytesDecodeAsTheFormulaSays) {
  for (bool with_base : {false, true}) {
    for (uint64_t cols : {256, 255}) {
      SCOPED_TRACE(std::to_string(cols) + (with_base ? " base" : ""));
      const FieldGeometry g{DType::kFloat16, 2, cols};
      const size_t nib_row = (cols + 1) / 2;
      std::vector<std::byte> region(kRegionHeaderSize + kChunkEntrySize);
      RegionHeader h;
      h.codec = 6;
      h.dtype = static_cast<uint8_t>(DType::kFloat16);
      h.flags = with_base ? kFlagChannelBase : 0;
      h.rows = 2;
      h.row_elems = cols;
      h.chunk_rows = 2;
      h.chunk_count = 1;
      h.EncodeTo(region.data());
      ChunkEntry{.coded_size = static_cast<uint32_t>(2 * cols), .mode = kModeStored}.EncodeTo(
          region.data() + kRegionHeaderSize);
      std::vector<uint8_t> base(cols);
      for (uint64_t k = 0; k < cols; ++k) base[k] = static_cast<uint8_t>(k * 37 + 11);
      if (with_base)
        for (uint8_t b : base) region.push_back(std::byte{b});
      for (float s : {0.5f, 3.0f}) {
        const uint32_t bits = std::bit_cast<uint32_t>(s);
        for (int k = 0; k < 4; ++k) region.push_back(std::byte{static_cast<uint8_t>(bits >> (8 * k))});
      }
      std::vector<uint8_t> nib(2 * nib_row), plane(2 * cols);
      for (size_t k = 0; k < nib.size(); ++k) nib[k] = static_cast<uint8_t>(k * 13 + (k >= nib_row ? 128 : 0));
      for (size_t k = 0; k < plane.size(); ++k) plane[k] = static_cast<uint8_t>(k * 7 + 3);
      for (uint8_t b : nib) region.push_back(std::byte{b});
      for (uint8_t b : plane) region.push_back(std::byte{b});
      Decoder d;
      std::vector<uint8_t> codes(g.elements());
      std::vector<float> scales(2);
      ASSERT_TRUE(d.DecodeFp8(region, CodecId::kFp8Planes, g, UINT64_MAX, codes, scales).ok());
      EXPECT_EQ(scales, (std::vector<float>{0.5f, 3.0f}));
      const auto out = ToU16(DecodeOk(d, region, CodecId::kFp8Planes, g));
      for (uint64_t r = 0; r < 2; ++r)
        for (uint64_t k = 0; k < cols; ++k) {
          const uint8_t n = (nib[r * nib_row + k / 2] >> (4 * (k % 2))) & 0x0F;
          const uint8_t b = with_base ? base[k] : 0;
          const uint8_t q = static_cast<uint8_t>(((n & 8) << 4) |
                                                 (((plane[r * cols + k] + b) & 0x0F) << 3) | (n & 7));
          ASSERT_EQ(codes[r * cols + k], q) << r << " " << k;
          ASSERT_EQ(out[r * cols + k], F32ToF16(E4M3ToF32(q) * scales[r])) << r << " " << k;
        }
    }
  }
}

TEST(Fp8Planes, CorruptionNamesTheCodecAndTheChunk) {
  ExpectCorruptionNamesTheCodecAndTheChunk(CodecId::kFp8Planes);
}

TEST(Fp8, RejectsOtherDtypes) {
  std::vector<std::byte> out, raw(16);
  EXPECT_EQ(Encode(CodecId::kFp8, {DType::kFloat32, 2, 2}, raw, {}, &out).code(),
            StatusCode::kInvalidArgument);
  Decoder d;
  std::vector<uint8_t> codes(4);
  std::vector<float> scales(2);
  const auto region = EncodeOk(CodecId::kPlanes, {DType::kBFloat16, 2, 4}, raw);
  EXPECT_EQ(d.DecodeFp8(region, CodecId::kPlanes, {DType::kBFloat16, 2, 4}, UINT64_MAX, codes, scales)
                .code(),
            StatusCode::kInvalidArgument);
}

// The codec table (codec/codec_table.h) holds one entry per id, at its id; the region's on-disk
// structs (codec/region.h) read back what Encode wrote, and write it again byte for byte.
// The index parser (format/, which depends on nothing) knows the same codec ids.
static_assert(format::index_internal::kMaxKnownCodec == kMaxCodecId);

TEST(CodecTable, OneEntryPerIdAndTheStructsReadWhatEncodeWrote) {
  for (int i = 0; i <= kMaxCodecId; ++i) {
    const CodecEntry* e = FindCodec(static_cast<CodecId>(i));
    ASSERT_NE(e, nullptr) << i;
    EXPECT_EQ(static_cast<int>(e->id), i);
    EXPECT_EQ(e->name, CodecName(e->id));
    EXPECT_EQ(e->has_region, i != 0);
    EXPECT_EQ(e->encode_chunk != nullptr && e->decode_chunk != nullptr, e->has_region);
    EXPECT_EQ(e->decode_codes != nullptr, e->lossy);  // the fp8 codecs hand out codes
  }
  EXPECT_EQ(FindCodec(static_cast<CodecId>(kMaxCodecId + 1)), nullptr);

  const FieldGeometry g{DType::kBFloat16, 300, 128};
  const auto raw = ToBytes(HiddenLike(DType::kBFloat16, g.rows, g.row_elems, 3));
  EncodeOptions options;
  options.chunk_elems = 128 * 100;  // 3 chunks of 100 rows
  for (CodecId id : {CodecId::kZstd, CodecId::kPlanes, CodecId::kFp8, CodecId::kFp8Entropy,
                     CodecId::kPlanes2, CodecId::kFp8Planes}) {
    SCOPED_TRACE(std::string(CodecName(id)));
    const auto region = EncodeOk(id, g, raw, options);
    ASSERT_GE(region.size(), kRegionHeaderSize + 3 * kChunkEntrySize);
    RegionHeader h;
    ASSERT_TRUE(RegionHeader::DecodeFrom(region.data(), &h));
    EXPECT_EQ(h.codec, static_cast<uint8_t>(id));
    EXPECT_EQ(h.dtype, static_cast<uint8_t>(g.dtype));
    EXPECT_EQ(h.reserved, 0);
    EXPECT_EQ(h.rows, g.rows);
    EXPECT_EQ(h.row_elems, g.row_elems);
    EXPECT_EQ(h.chunk_rows, 100u);
    EXPECT_EQ(h.chunk_count, 3u);
    std::vector<std::byte> again(kRegionHeaderSize + 3 * kChunkEntrySize);
    h.EncodeTo(again.data());
    uint64_t coded_total = 0;
    for (int c = 0; c < 3; ++c) {
      const ChunkEntry e = ChunkEntry::DecodeFrom(region.data() + kRegionHeaderSize + 8 * c);
      EXPECT_EQ(e.reserved, 0u);
      coded_total += e.coded_size;
      e.EncodeTo(again.data() + kRegionHeaderSize + 8 * c);
    }
    EXPECT_TRUE(std::equal(again.begin(), again.end(), region.begin()));
    EXPECT_LT(coded_total, region.size());
    auto info = ParseRegion(region, id, g);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->chunk_count, 3u);
  }
  std::vector<std::byte> junk(kRegionHeaderSize);
  RegionHeader h;
  EXPECT_FALSE(RegionHeader::DecodeFrom(junk.data(), &h));
}

}  // namespace
}  // namespace libshard::codec
