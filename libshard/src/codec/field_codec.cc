// Field codecs: FORMAT.md §4.3.
#include "codec/field_codec.h"

#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include "codec/huffman.h"
#include "codec/plane_kernels.h"
#include "format/bytes.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace libshard::codec {
namespace {

using format::CheckedAdd;
using format::CheckedMul;
using format::GetU32;
using format::GetU64;
using format::PutU32;
using format::PutU64;

constexpr uint8_t kMagic[4] = {0x4C, 0x53, 0x46, 0x43};  // "LSFC"
constexpr uint8_t kModeStored = 0;
constexpr uint8_t kModeZstd = 1;
constexpr uint8_t kModeHuffman = 2;
constexpr uint8_t kFlagChannelBase = 1;  // planes, fp8-entropy: channel base table (§4.3.4/5)
// Below this many elements per row the channel base table costs more than it saves.
constexpr uint64_t kMinChannelBaseElems = 64;

struct ZstdCCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct ZstdDCtxDeleter {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};

// One thread's encoder state: a zstd context and the plane buffers of one chunk.
struct EncoderScratch {
  std::unique_ptr<ZSTD_CCtx, ZstdCCtxDeleter> cctx{ZSTD_createCCtx()};
  std::vector<std::byte> a;
  std::vector<std::byte> b;
};
EncoderScratch& ThreadEncoderScratch() {
  thread_local EncoderScratch s;
  return s;
}

uint8_t U8(std::byte b) { return std::to_integer<uint8_t>(b); }

// Bytes of a chunk's coded plane per row (§4.3.2 table).
uint64_t CodedRowBytes(CodecId id, const FieldGeometry& g) {
  return id == CodecId::kZstd ? g.row_elems * DTypeSize(g.dtype) : g.row_elems;
}
// Bytes of a chunk's fixed part per row.
uint64_t FixedRowBytes(CodecId id, const FieldGeometry& g) {
  switch (id) {
    case CodecId::kPlanes: return g.row_elems;
    case CodecId::kFp8:
    case CodecId::kFp8Entropy: return kFp8ScaleBytes;
    default: return 0;
  }
}

Status CheckGeometry(CodecId id, const FieldGeometry& g, uint64_t* elements, uint64_t* bytes) {
  if (static_cast<uint8_t>(id) > kMaxCodecId)
    return Status::InvalidArgument("unknown codec id " + std::to_string(static_cast<int>(id)));
  if (!CodecAccepts(id, g.dtype))
    return Status::InvalidArgument(std::string("codec ") + std::string(CodecName(id)) +
                                   " cannot store a tensor of dtype " +
                                   std::string(DTypeName(g.dtype)));
  if (!CheckedMul(g.rows, g.row_elems, elements) ||
      !CheckedMul(*elements, DTypeSize(g.dtype), bytes))
    return Status::InvalidArgument("tensor geometry overflows (" + std::to_string(g.rows) +
                                   " rows of " + std::to_string(g.row_elems) + " elements)");
  return Status::OK();
}

// Appends the coded plane of `src` to `out`: Huffman-coded (mode 2) or zstd-coded (mode 1) as
// `options` say, when that is strictly smaller, else as it is (mode 0). Returns the mode.
Result<uint8_t> AppendCoded(ZSTD_CCtx* cctx, const EncodeOptions& options, const std::byte* src,
                            size_t n, bool allow_coding, std::vector<std::byte>* out) {
  const size_t start = out->size();
  if (allow_coding && n > 0 && options.entropy == EntropyCoder::kHuffman) {
    huffman::Encode(reinterpret_cast<const uint8_t*>(src), n, out);
    if (out->size() - start < n) return kModeHuffman;
    out->resize(start);
  } else if (allow_coding && n > 0) {
    const size_t bound = ZSTD_compressBound(n);
    out->resize(start + bound);
    ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, options.level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
    const size_t z = ZSTD_compress2(cctx, out->data() + start, bound, src, n);
    if (ZSTD_isError(z))
      return Status::Internal(std::string("zstd compression failed: ") + ZSTD_getErrorName(z));
    if (z < n) {
      out->resize(start + z);
      return kModeZstd;
    }
    out->resize(start);
  }
  out->insert(out->end(), src, src + n);
  return kModeStored;
}

float LoadF32(const std::byte* p) { return std::bit_cast<float>(GetU32(p)); }

std::string ChunkName(uint64_t c) { return "chunk " + std::to_string(c); }

}  // namespace

std::string_view CodecName(CodecId id) {
  switch (id) {
    case CodecId::kRaw: return "raw";
    case CodecId::kZstd: return "zstd";
    case CodecId::kPlanes: return "planes";
    case CodecId::kFp8: return "fp8";
    case CodecId::kFp8Entropy: return "fp8-entropy";
  }
  return "";
}

bool IsLossy(CodecId id) { return id == CodecId::kFp8 || id == CodecId::kFp8Entropy; }

bool CodecAccepts(CodecId id, DType dtype) {
  if (DTypeSize(dtype) == 0) return false;
  switch (id) {
    case CodecId::kRaw:
    case CodecId::kZstd: return true;
    case CodecId::kPlanes:
    case CodecId::kFp8:
    case CodecId::kFp8Entropy: return dtype == DType::kBFloat16 || dtype == DType::kFloat16;
  }
  return false;
}

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
    if (!CheckedMul(*target, shape[d], target))
      return Status::InvalidArgument("tensor shape overflows");
  }
  uint64_t elements = 0, bytes = 0;
  if (!CheckedMul(g.rows, g.row_elems, &elements) ||
      !CheckedMul(elements, DTypeSize(dtype), &bytes))
    return Status::InvalidArgument("tensor shape overflows");
  return g;
}

uint64_t DecodedBytes(const FieldGeometry& g, uint64_t rows) {
  return std::min(rows, g.rows) * g.row_elems * DTypeSize(g.dtype);
}

Status Encode(CodecId id, const FieldGeometry& g, std::span<const std::byte> raw,
              const EncodeOptions& options, std::vector<std::byte>* out) {
  uint64_t elements = 0, bytes = 0;
  LIBSHARD_RETURN_IF_ERROR(CheckGeometry(id, g, &elements, &bytes));
  if (bytes != raw.size())
    return Status::InvalidArgument("tensor holds " + std::to_string(raw.size()) +
                                   " bytes; its geometry says " + std::to_string(bytes));
  if (id == CodecId::kRaw) {
    out->insert(out->end(), raw.begin(), raw.end());
    return Status::OK();
  }
  if (elements == 0) return Status::OK();

  const uint64_t coded_row = CodedRowBytes(id, g);
  if (coded_row > kMaxChunkPlaneBytes)
    return Status::InvalidArgument("a row of " + std::to_string(coded_row) +
                                   " bytes exceeds the largest chunk plane (2^31 - 1 bytes); "
                                   "store this field raw");
  uint64_t chunk_rows = std::max<uint64_t>(1, options.chunk_elems / g.row_elems);
  chunk_rows = std::min({chunk_rows, kMaxChunkPlaneBytes / coded_row, g.rows,
                         uint64_t{std::numeric_limits<uint32_t>::max()}});
  const uint64_t chunk_count = (g.rows + chunk_rows - 1) / chunk_rows;
  if (chunk_count > std::numeric_limits<uint32_t>::max())
    return Status::InvalidArgument("tensor needs more than 2^32 - 1 chunks");
  const bool channel_base = (id == CodecId::kPlanes || id == CodecId::kFp8Entropy) &&
                            options.channel_base && g.row_elems >= kMinChannelBaseElems;
  const size_t w = DTypeSize(g.dtype);

  // Header (§4.3.2).
  const size_t region_start = out->size();
  out->resize(region_start + kRegionHeaderSize + kChunkEntrySize * chunk_count);
  std::byte* h = out->data() + region_start;
  for (int k = 0; k < 4; ++k) h[k] = std::byte{kMagic[k]};
  h[4] = std::byte{static_cast<uint8_t>(id)};
  h[5] = std::byte{static_cast<uint8_t>(g.dtype)};
  h[6] = std::byte{static_cast<uint8_t>(channel_base ? kFlagChannelBase : 0)};
  h[7] = std::byte{0};
  PutU64(h + 8, g.rows);
  PutU64(h + 16, g.row_elems);
  PutU32(h + 24, static_cast<uint32_t>(chunk_rows));
  PutU32(h + 28, static_cast<uint32_t>(chunk_count));

  const uint8_t* src = reinterpret_cast<const uint8_t*>(raw.data());
  EncoderScratch& s = ThreadEncoderScratch();
  if (!s.cctx) return Status::ResourceExhausted("cannot create a zstd compression context");
  // fp8: every row's scale and codes first (§4.3.5), so the channel base can see all of them.
  std::vector<float> scales;
  if (IsLossy(id)) {
    scales.resize(g.rows);
    s.b.resize(elements);
    QuantizeRows(src, g, scales.data(), reinterpret_cast<uint8_t*>(s.b.data()));
  }
  const auto* codes = reinterpret_cast<const uint8_t*>(s.b.data());
  // Channel base: the rounded mean over the rows of each channel's exponent bits (planes: hi &
  // 0x7F, §4.3.4; fp8: the code's 4 exponent bits, §4.3.5), and bit 7 set when most of the
  // channel's values are negative.
  std::vector<uint8_t> base;
  if (channel_base) {
    std::vector<uint64_t> sums(g.row_elems, 0), negatives(g.row_elems, 0);
    for (uint64_t r = 0; r < g.rows; ++r) {
      if (id == CodecId::kPlanes) {
        const uint8_t* row = src + r * g.row_elems * 2;
        for (uint64_t c = 0; c < g.row_elems; ++c) {
          sums[c] += row[2 * c + 1] & 0x7F;
          negatives[c] += row[2 * c + 1] >> 7;
        }
      } else {
        const uint8_t* row = codes + r * g.row_elems;
        for (uint64_t c = 0; c < g.row_elems; ++c) {
          sums[c] += (row[c] >> 3) & 0xF;
          negatives[c] += row[c] >> 7;
        }
      }
    }
    base.resize(g.row_elems);
    for (uint64_t c = 0; c < g.row_elems; ++c)
      base[c] = static_cast<uint8_t>((sums[c] + g.rows / 2) / g.rows |
                                     (2 * negatives[c] > g.rows ? 0x80 : 0));
    const auto* b = reinterpret_cast<const std::byte*>(base.data());
    out->insert(out->end(), b, b + base.size());
  }

  for (uint64_t c = 0; c < chunk_count; ++c) {
    const uint64_t row0 = c * chunk_rows;
    const uint64_t rc = std::min(chunk_rows, g.rows - row0);
    const size_t n = static_cast<size_t>(rc * g.row_elems);
    const uint8_t* chunk = src + row0 * g.row_elems * w;
    s.a.resize(n * w);
    auto* a = reinterpret_cast<uint8_t*>(s.a.data());
    uint8_t mode = 0;
    size_t coded_start = 0;
    switch (id) {
      case CodecId::kZstd: {
        // Byte planes: plane k holds byte k of every element (§4.3.3).
        if (w == 1) {
          std::memcpy(a, chunk, n);
        } else {
          for (size_t i = 0; i < n; ++i)
            for (size_t k = 0; k < w; ++k) a[k * n + i] = chunk[i * w + k];
        }
        coded_start = out->size();
        EncodeOptions zstd_options = options;  // codec 1 is zstd by definition (§4.3.3)
        zstd_options.entropy = EntropyCoder::kZstd;
        LIBSHARD_ASSIGN_OR_RETURN(mode, AppendCoded(s.cctx.get(), zstd_options, s.a.data(),
                                                    n * w, true, out));
        break;
      }
      case CodecId::kPlanes: {
        // Fixed part: the low bytes; coded part: the high bytes minus the channel base.
        uint8_t* lo = a;
        uint8_t* hi = a + n;
        for (size_t i = 0; i < n; ++i) {
          lo[i] = chunk[2 * i];
          hi[i] = chunk[2 * i + 1];
        }
        if (channel_base)
          for (size_t r = 0; r < rc; ++r)
            for (size_t k = 0; k < g.row_elems; ++k)
              hi[r * g.row_elems + k] = RemoveBase(hi[r * g.row_elems + k], base[k], false);
        out->insert(out->end(), s.a.data(), s.a.data() + n);
        coded_start = out->size();
        LIBSHARD_ASSIGN_OR_RETURN(mode, AppendCoded(s.cctx.get(), options, s.a.data() + n,
                                                    n, true, out));
        break;
      }
      case CodecId::kFp8:
      case CodecId::kFp8Entropy: {
        // Fixed part: one float32 scale per row; coded part: the codes less 8 · channel base.
        const size_t scales_at = out->size();
        out->resize(scales_at + kFp8ScaleBytes * rc);
        for (size_t r = 0; r < rc; ++r)
          PutU32(out->data() + scales_at + kFp8ScaleBytes * r,
                 std::bit_cast<uint32_t>(scales[row0 + r]));
        std::memcpy(a, codes + row0 * g.row_elems, n);
        if (channel_base)
          for (size_t r = 0; r < rc; ++r)
            for (size_t k = 0; k < g.row_elems; ++k)
              a[r * g.row_elems + k] = RemoveBase(a[r * g.row_elems + k], base[k], true);
        coded_start = out->size();
        EncodeOptions fp8_options = options;
        fp8_options.entropy = options.fp8_entropy;
        LIBSHARD_ASSIGN_OR_RETURN(mode, AppendCoded(s.cctx.get(), fp8_options, s.a.data(), n,
                                                    id == CodecId::kFp8Entropy, out));
        break;
      }
      case CodecId::kRaw: break;
    }
    const uint64_t coded = out->size() - coded_start;
    std::byte* entry = out->data() + region_start + kRegionHeaderSize + kChunkEntrySize * c;
    PutU32(entry, static_cast<uint32_t>(coded));
    entry[4] = std::byte{mode};
    entry[5] = entry[6] = entry[7] = std::byte{0};
  }
  return Status::OK();
}

Result<RegionInfo> ParseRegion(std::span<const std::byte> region, CodecId id,
                               const FieldGeometry& g) {
  uint64_t elements = 0, bytes = 0;
  LIBSHARD_RETURN_IF_ERROR(CheckGeometry(id, g, &elements, &bytes));
  if (id == CodecId::kRaw) return Status::InvalidArgument("a raw field has no codec region");
  RegionInfo info;
  info.codec = id;
  if (elements == 0) {
    if (!region.empty())
      return Status::Corruption("codec region of a tensor without elements holds " +
                                std::to_string(region.size()) + " bytes; it must be empty");
    return info;
  }
  const std::string what = "codec region (" + std::string(CodecName(id)) + ")";
  if (region.size() < kRegionHeaderSize)
    return Status::Corruption(what + " of " + std::to_string(region.size()) +
                              " bytes is shorter than its 32-byte header");
  const std::byte* h = region.data();
  for (int k = 0; k < 4; ++k)
    if (U8(h[k]) != kMagic[k]) return Status::Corruption(what + ": bad magic (not \"LSFC\")");
  if (U8(h[4]) != static_cast<uint8_t>(id))
    return Status::Corruption(what + ": header names codec " + std::to_string(U8(h[4])) +
                              " but the index says " + std::to_string(static_cast<int>(id)));
  if (U8(h[5]) != static_cast<uint32_t>(g.dtype))
    return Status::Corruption(what + ": header names dtype " + std::to_string(U8(h[5])) +
                              " but the field's dtype is " + std::to_string(static_cast<uint32_t>(g.dtype)));
  const uint8_t allowed_flags =
      (id == CodecId::kPlanes || id == CodecId::kFp8Entropy) ? kFlagChannelBase : 0;
  if ((U8(h[6]) & ~allowed_flags) != 0 || U8(h[7]) != 0)
    return Status::Corruption(what + ": reserved header bits are set");
  info.flags = U8(h[6]);
  const uint64_t rows = GetU64(h + 8), row_elems = GetU64(h + 16);
  if (rows != g.rows || row_elems != g.row_elems)
    return Status::Corruption(what + ": header says " + std::to_string(rows) + " rows of " +
                              std::to_string(row_elems) + " elements; the index's dims say " +
                              std::to_string(g.rows) + " of " + std::to_string(g.row_elems));
  info.chunk_rows = GetU32(h + 24);
  info.chunk_count = GetU32(h + 28);
  const uint64_t coded_row = CodedRowBytes(id, g), fixed_row = FixedRowBytes(id, g);
  uint64_t chunk_plane = 0;
  if (info.chunk_rows == 0 || info.chunk_rows > rows ||
      !CheckedMul(coded_row, info.chunk_rows, &chunk_plane) || chunk_plane > kMaxChunkPlaneBytes)
    return Status::Corruption(what + ": chunk_rows " + std::to_string(info.chunk_rows) +
                              " is out of range");
  if (info.chunk_count != (rows + info.chunk_rows - 1) / info.chunk_rows)
    return Status::Corruption(what + ": chunk_count " + std::to_string(info.chunk_count) +
                              " does not cover " + std::to_string(rows) + " rows");
  uint64_t table_end = kRegionHeaderSize + uint64_t{kChunkEntrySize} * info.chunk_count;
  if (info.flags & kFlagChannelBase) {
    if (!CheckedAdd(table_end, row_elems, &table_end))
      return Status::Corruption(what + ": channel base table overflows");
  }
  if (table_end > region.size())
    return Status::Corruption(what + ": chunk table ends at byte " + std::to_string(table_end) +
                              ", past the region's " + std::to_string(region.size()) + " bytes");
  uint64_t total = table_end;
  for (uint64_t c = 0; c < info.chunk_count; ++c) {
    const std::byte* e = h + kRegionHeaderSize + kChunkEntrySize * c;
    const uint64_t coded = GetU32(e);
    const uint8_t mode = U8(e[4]);
    if (U8(e[5]) != 0 || U8(e[6]) != 0 || U8(e[7]) != 0)
      return Status::Corruption(what + ": " + ChunkName(c) + ": reserved bytes are set");
    const uint64_t rc = std::min<uint64_t>(info.chunk_rows, rows - c * info.chunk_rows);
    const uint64_t plane = rc * coded_row;
    if (mode == kModeStored) {
      if (coded != plane)
        return Status::Corruption(what + ": " + ChunkName(c) + ": stored plane of " +
                                  std::to_string(coded) + " bytes; expected " +
                                  std::to_string(plane));
    } else if ((mode == kModeZstd && id != CodecId::kFp8) ||
               (mode == kModeHuffman && (id == CodecId::kPlanes || id == CodecId::kFp8Entropy))) {
      if (coded == 0 || coded >= plane)
        return Status::Corruption(what + ": " + ChunkName(c) + ": coded plane of " +
                                  std::to_string(coded) + " bytes is not smaller than the " +
                                  std::to_string(plane) + " it decodes to");
    } else {
      return Status::Corruption(what + ": " + ChunkName(c) + ": unknown mode " +
                                std::to_string(mode));
    }
    if (!CheckedAdd(total, rc * fixed_row + coded, &total))
      return Status::Corruption(what + ": chunk sizes overflow");
  }
  if (total != region.size())
    return Status::Corruption(what + ": chunks end at byte " + std::to_string(total) +
                              " but the region holds " + std::to_string(region.size()));
  info.chunks_offset = static_cast<size_t>(table_end);
  return info;
}

struct Decoder::State {
  std::unique_ptr<ZSTD_DCtx, ZstdDCtxDeleter> dctx{ZSTD_createDCtx()};
  std::vector<std::byte> scratch;

  // Decompresses a zstd plane of `coded` bytes that must decode to exactly `n` bytes at dst.
  // Decodes a mode 1 or 2 plane of `coded_size` bytes into exactly n bytes at dst.
  // Errors do not say where: the caller adds that (building the text only on an error).
  Status Unpack(uint8_t mode, const std::byte* coded, size_t coded_size, std::byte* dst,
                size_t n) {
    if (mode == kModeHuffman)
      return huffman::Decode(coded, coded_size, reinterpret_cast<uint8_t*>(dst), n);
    return Unzstd(coded, coded_size, dst, n);
  }
  Status Unzstd(const std::byte* coded, size_t coded_size, std::byte* dst, size_t n) {
    if (!dctx) return Status::ResourceExhausted("cannot create a zstd decompression context");
    const unsigned long long content = ZSTD_getFrameContentSize(coded, coded_size);
    if (content != n)
      return Status::Corruption("zstd frame does not declare its " +
                                std::to_string(n) + "-byte content");
    if (ZSTD_findFrameCompressedSize(coded, coded_size) != coded_size)
      return Status::Corruption("zstd frame does not span its " +
                                std::to_string(coded_size) + " coded bytes");
    const size_t got = ZSTD_decompressDCtx(dctx.get(), dst, n, coded, coded_size);
    if (ZSTD_isError(got))
      return Status::Corruption(std::string("zstd: ") + ZSTD_getErrorName(got));
    if (got != n)
      return Status::Corruption("zstd frame decoded to " + std::to_string(got) +
                                " bytes; expected " + std::to_string(n));
    return Status::OK();
  }
  std::byte* Scratch(size_t n) {
    if (scratch.size() < n) scratch.resize(n);
    return scratch.data();
  }
};

Decoder::Decoder() : state_(std::make_unique<State>()) {}
Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

Status Decoder::Decode(std::span<const std::byte> region, CodecId id, const FieldGeometry& g,
                       uint64_t max_rows, std::span<std::byte> dst) {
  if (id == CodecId::kRaw) {
    uint64_t elements = 0, bytes = 0;
    LIBSHARD_RETURN_IF_ERROR(CheckGeometry(id, g, &elements, &bytes));
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
  LIBSHARD_ASSIGN_OR_RETURN(RegionInfo info, ParseRegion(region, id, g));
  const uint64_t want = DecodedBytes(g, max_rows);
  if (dst.size() != want)
    return Status::InvalidArgument("destination holds " + std::to_string(dst.size()) +
                                   " bytes; " + std::to_string(want) + " are decoded");
  if (info.chunk_count == 0) return Status::OK();  // no elements: nothing to decode
  const uint64_t rows_wanted = std::min(max_rows, g.rows);
  const size_t w = DTypeSize(g.dtype);
  const uint8_t* base = (info.flags & kFlagChannelBase)
                            ? reinterpret_cast<const uint8_t*>(region.data()) +
                                  info.chunks_offset - g.row_elems
                            : nullptr;
  const std::byte* p = region.data() + info.chunks_offset;
  auto* out = reinterpret_cast<uint8_t*>(dst.data());
  for (uint64_t c = 0, row0 = 0; row0 < rows_wanted; ++c, row0 += info.chunk_rows) {
    const std::byte* e = region.data() + kRegionHeaderSize + kChunkEntrySize * c;
    const size_t coded = GetU32(e);
    const uint8_t mode = U8(e[4]);
    const bool zstd = mode != kModeStored;  // zstd or Huffman: coded
    const uint64_t rc = std::min<uint64_t>(info.chunk_rows, g.rows - row0);
    const uint64_t need = std::min<uint64_t>(rc, rows_wanted - row0);
    const size_t n = static_cast<size_t>(rc * g.row_elems);
    const size_t n_need = static_cast<size_t>(need * g.row_elems);
    uint8_t* chunk_out = out + row0 * g.row_elems * w;
    const auto where = [&] {
      return "codec region (" + std::string(CodecName(id)) + "): " + ChunkName(c);
    };
    // The chunk's one-byte plane at `coded_at` (n bytes): as stored, or decoded (Huffman or
    // zstd) into the thread's scratch, which a chunk (at most ~1 MiB of plane) keeps in the
    // core's cache for the interleave or dequantization that reads it next. (Decoding into the
    // upper half of the chunk's own output instead sent the plane through memory twice more:
    // measured, the interleave then cost half as much as the Huffman decode.)
    const auto byte_plane = [&](const std::byte* coded_at) -> Result<const uint8_t*> {
      if (!zstd) return reinterpret_cast<const uint8_t*>(coded_at);
      std::byte* tmp = state_->Scratch(n);
      if (Status st = state_->Unpack(mode, coded_at, coded, tmp, n); !st.ok())
        return st.WithContext(where());
      return reinterpret_cast<const uint8_t*>(tmp);
    };
    switch (id) {
      case CodecId::kZstd: {
        const std::byte* plane = p;
        if (zstd) {
          std::byte* tmp = (w == 1 && need == rc) ? reinterpret_cast<std::byte*>(chunk_out)
                                                  : state_->Scratch(n * w);
          if (Status st = state_->Unpack(mode, p, coded, tmp, n * w); !st.ok())
            return st.WithContext(where());
          plane = tmp;
        }
        const auto* pl = reinterpret_cast<const uint8_t*>(plane);
        if (w == 1) {
          if (pl != chunk_out) std::memcpy(chunk_out, pl, n_need);
        } else {
          for (size_t i = 0; i < n_need; ++i)
            for (size_t k = 0; k < w; ++k) chunk_out[i * w + k] = pl[k * n + i];
        }
        p += coded;
        break;
      }
      case CodecId::kPlanes: {
        const auto* lo = reinterpret_cast<const uint8_t*>(p);
        LIBSHARD_ASSIGN_OR_RETURN(const uint8_t* hi, byte_plane(p + n));
        Interleave(lo, hi, base, g.row_elems, n_need, chunk_out);
#if defined(__SSE2__)
        _mm_sfence();  // the non-temporal stores of InterleaveRun, before anyone reads dst
#endif
        p += n + coded;
        break;
      }
      case CodecId::kFp8:
      case CodecId::kFp8Entropy: {
        const std::byte* scales = p;
        LIBSHARD_ASSIGN_OR_RETURN(const uint8_t* q, byte_plane(p + kFp8ScaleBytes * rc));
        for (uint64_t r = 0; r < need; ++r)
          DequantizeRow(q + r * g.row_elems, base, g.row_elems,
                        LoadF32(scales + kFp8ScaleBytes * r), g.dtype,
                        chunk_out + 2 * r * g.row_elems);
        p += kFp8ScaleBytes * rc + coded;
        break;
      }
      case CodecId::kRaw: break;
    }
  }
  return Status::OK();
}

Status Decoder::DecodeFp8(std::span<const std::byte> region, CodecId id, const FieldGeometry& g,
                          uint64_t max_rows, std::span<uint8_t> fp8_dst,
                          std::span<float> scales_dst) {
  if (!IsLossy(id)) return Status::InvalidArgument("DecodeFp8 needs an fp8 codec");
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
  const std::byte* p = region.data() + info.chunks_offset;
  const std::string what = "codec region (" + std::string(CodecName(id)) + ")";
  const uint8_t* base = (info.flags & kFlagChannelBase)
                            ? reinterpret_cast<const uint8_t*>(region.data()) +
                                  info.chunks_offset - g.row_elems
                            : nullptr;
  for (uint64_t c = 0, row0 = 0; row0 < rows_wanted; ++c, row0 += info.chunk_rows) {
    const std::byte* e = region.data() + kRegionHeaderSize + kChunkEntrySize * c;
    const size_t coded = GetU32(e);
    const uint8_t mode = U8(e[4]);
    const bool zstd = mode != kModeStored;  // zstd or Huffman: coded
    const uint64_t rc = std::min<uint64_t>(info.chunk_rows, g.rows - row0);
    const uint64_t need = std::min<uint64_t>(rc, rows_wanted - row0);
    const size_t n = static_cast<size_t>(rc * g.row_elems);
    for (uint64_t r = 0; r < need; ++r) scales_dst[row0 + r] = LoadF32(p + kFp8ScaleBytes * r);
    const std::byte* coded_at = p + kFp8ScaleBytes * rc;
    uint8_t* q_out = fp8_dst.data() + row0 * g.row_elems;
    if (zstd) {
      std::byte* tmp = need == rc ? reinterpret_cast<std::byte*>(q_out) : state_->Scratch(n);
      if (Status st = state_->Unpack(mode, coded_at, coded, tmp, n); !st.ok())
        return st.WithContext(what + ": " + ChunkName(c));
      if (need != rc) std::memcpy(q_out, tmp, need * g.row_elems);
    } else {
      std::memcpy(q_out, coded_at, need * g.row_elems);
    }
    if (base != nullptr)
      for (uint64_t r = 0; r < need; ++r) ApplyBase(q_out + r * g.row_elems, base, g.row_elems, true);
    p += kFp8ScaleBytes * rc + coded;
  }
  return Status::OK();
}

}  // namespace libshard::codec
