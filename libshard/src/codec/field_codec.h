// Field codecs (FORMAT.md §4.3): one tensor's bytes <-> its stored region, chunked by row blocks
// along the field's sequence dimension so a reader can decode a prefix of rows (`max_len`).
//
// Bytes in, bytes out: no system calls, no I/O. Errors are Status values: `InvalidArgument` for a
// caller's mistake (wrong sizes, a dtype the codec does not take), `Corruption` for a region that
// violates §4.3, naming what is wrong; the caller adds file, sample and offset. A region from an
// untrusted file never makes the decoder read or write out of bounds, and nothing is allocated
// in proportion to a value read from it (the decoder's scratch is bounded by the geometry the
// caller passes, which comes from the index's dims).
//
// Thread-safety: the free functions are thread-safe (each thread keeps its own zstd contexts and
// scratch). A `Decoder` is one thread's: give each worker thread its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "libshard/dtype.h"
#include "libshard/status.h"

namespace libshard::codec {

// Codec ids (FORMAT.md §4.3.1). The numbers are part of the format.
enum class CodecId : uint8_t {
  kRaw = 0,         // the tensor's bytes as they are (v1 layout)
  kZstd = 1,        // byte-shuffled zstd per chunk, any dtype, lossless
  kPlanes = 2,      // bf16/fp16 planes: entropy-coded sign+exponent byte, low byte stored; lossless
  kFp8 = 3,         // float8_e4m3fn, one float32 scale per row; lossy
  kFp8Entropy = 4,  // kFp8 with the fp8 bytes entropy-coded; lossy
  kPlanes2 = 5,     // bf16/fp16 planes: entropy-coded exponent bits, sign bitmap and low byte
                    // stored; lossless
  kFp8Planes = 6,   // kFp8's codes: entropy-coded exponent bits, sign and mantissa nibbles
                    // stored; lossy
};
inline constexpr uint8_t kMaxCodecId = 6;

// "raw", "zstd", "planes", "fp8", "fp8-entropy", "planes2", "fp8-planes"; "" for an unknown id.
std::string_view CodecName(CodecId id);
bool IsLossy(CodecId id);
// Whether `id` can store a tensor of `dtype`: raw and zstd take every dtype; planes, fp8,
// fp8-entropy, planes2 and fp8-planes take bfloat16 and float16.
bool CodecAccepts(CodecId id, DType dtype);

inline constexpr size_t kRegionHeaderSize = 32;
inline constexpr size_t kChunkEntrySize = 8;
// A chunk's coded plane fits a u32 size (§4.3.2).
inline constexpr uint64_t kMaxChunkPlaneBytes = (uint64_t{1} << 31) - 1;
inline constexpr uint32_t kFp8ScaleBytes = 4;  // float32

// A tensor seen as a matrix of `rows` rows of `row_elems` elements (§4.3.1): rows are the product
// of the dims up to and including seq_dim (dim 0 when seq_dim is -1; 1 for a scalar) and a row is
// everything after it. The index's dims determine it; a region must agree with it exactly.
struct FieldGeometry {
  DType dtype = DType::kBFloat16;
  uint64_t rows = 0;
  uint64_t row_elems = 0;
  uint64_t elements() const { return rows * row_elems; }  // caller keeps this within limits
};
// The geometry of a tensor of `dtype` with `shape`; seq_dim is -1 or < shape.size().
// InvalidArgument if the element count or byte size overflows.
Result<FieldGeometry> GeometryOf(DType dtype, std::span<const uint64_t> shape, int32_t seq_dim);

// The entropy coder of the coded planes (FORMAT.md §4.3.2 modes 1 and 2).
enum class EntropyCoder : uint8_t { kZstd = 1, kHuffman = 2 };

struct EncodeOptions {
  // Planes (codecs 2 and 5) and fp8-planes (codec 6): the libshard Huffman coder decodes ~2x faster
  // than zstd's and codes the exponent plane smaller (no LZ sequences); fp8-entropy (codec 4): zstd, whose Huffman handles the
  // ~7-bit codes better (bench/codec_bench.py). Codec 1 is always zstd.
  EntropyCoder entropy = EntropyCoder::kHuffman;
  EntropyCoder fp8_entropy = EntropyCoder::kZstd;
  // zstd level where zstd codes a plane (1: Huffman-coded literals at the highest speed).
  int level = 1;
  // Target elements per chunk; a chunk holds max(1, chunk_elems / row_elems) rows. 2^20 (2 MiB of
  // bf16) measured best in ratio and decode speed among 2^16, 2^18 and 2^20 (bench/codec_bench.py);
  // it is 256 tokens at H = 4096, the granularity of a prefix (max_len) decode.
  uint64_t chunk_elems = uint64_t{1} << 20;
  // Rows per chunk when > 0, instead of chunk_elems (clamped to the tensor's rows): the writer's
  // row blocks (FORMAT.md §3.10.5), so that a region's chunks are its blocks.
  uint64_t chunk_rows = 0;
  // Planes, planes2, fp8-entropy and fp8-planes: code each value relative to a per-channel base
  // exponent (§4.3.4, §4.3.5, §4.3.7, §4.3.8), when a row has at least 64 elements.
  bool channel_base = true;
};

// Appends the stored region of `raw` (the tensor's C-contiguous bytes, geometry.elements() ·
// DTypeSize bytes) under codec `id` to `out`. Lossy codecs quantize (§4.3.5). Raw appends the
// bytes as they are. A tensor without elements has an empty region.
Status Encode(CodecId id, const FieldGeometry& geometry, std::span<const std::byte> raw,
              const EncodeOptions& options, std::vector<std::byte>* out);

// What a reader learns from a region's header and chunk table, after checking them (§4.3.2).
struct RegionInfo {
  CodecId codec = CodecId::kRaw;
  uint32_t flags = 0;
  uint32_t chunk_rows = 0;
  uint32_t chunk_count = 0;
  size_t chunks_offset = 0;  // where chunk 0 starts within the region
};
// Checks a region's header and chunk table against the codec and geometry the index gives.
Result<RegionInfo> ParseRegion(std::span<const std::byte> region, CodecId id,
                               const FieldGeometry& geometry);
// ParseRegion of a region of `region_size` bytes of which `head` holds the first bytes, at least
// its header, chunk table and channel base table (a reader of some rows reads only these and the
// chunks covering them, FORMAT.md §3.10.2). The sizes in the table must add up to region_size.
Result<RegionInfo> ParseRegionHead(std::span<const std::byte> head, uint64_t region_size,
                                   CodecId id, const FieldGeometry& geometry);

// Where chunk c of a checked region lies: [offset, offset + size) of the region, of which the
// last coded_size bytes are its coded part.
struct ChunkPlace {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t coded_size = 0;
};
// Every chunk's place in the region whose head ParseRegionHead checked into `info`.
std::vector<ChunkPlace> ChunkPlaces(std::span<const std::byte> head, const RegionInfo& info,
                                    const FieldGeometry& geometry);
// The bytes of a chunk's fixed part per row for codec `id` (FORMAT.md §4.3.2's table), and
// whether the codec may carry a channel base table; for a reader that places chunks from the
// index alone (FORMAT.md §3.10.2). Precondition: CodecAccepts(id, geometry.dtype).
uint64_t FixedRowBytes(CodecId id, const FieldGeometry& geometry);
bool MayHaveChannelBase(CodecId id);

// Bytes of the decoded first `rows` rows (clamped to geometry.rows) in the field's dtype.
uint64_t DecodedBytes(const FieldGeometry& geometry, uint64_t rows);

// Decodes regions. Owns a zstd decompression context and a scratch buffer (grown to at most one
// chunk's plane, which the geometry bounds), so decoding allocates only on first use.
class Decoder {
 public:
  Decoder();
  ~Decoder();
  Decoder(Decoder&&) noexcept;
  Decoder& operator=(Decoder&&) noexcept;

  // Decodes the first min(max_rows, geometry.rows) rows of `region` into `dst`, which must hold
  // exactly DecodedBytes(geometry, max_rows) bytes. Lossy codecs dequantize into the field's
  // dtype. Only the chunks covering those rows are read.
  Status Decode(std::span<const std::byte> region, CodecId id, const FieldGeometry& geometry,
                uint64_t max_rows, std::span<std::byte> dst);

  // Decodes rows [row_begin, row_end) (row_begin < row_end <= geometry.rows) of a region of
  // `region_size` bytes, from its head (as ParseRegionHead takes it) and `body`, the region's
  // bytes [body_offset, body_offset + body.size()), which must cover every chunk holding those
  // rows (InvalidArgument otherwise), into `dst` of exactly (row_end - row_begin) rows. A chunk
  // that starts before row_begin is decoded up to row_end into a scratch of one chunk, and its
  // rows from row_begin copied.
  Status DecodeRows(std::span<const std::byte> head, uint64_t region_size,
                    std::span<const std::byte> body, uint64_t body_offset, CodecId id,
                    const FieldGeometry& geometry, uint64_t row_begin, uint64_t row_end,
                    std::span<std::byte> dst);

  // fp8 codecs only: the stored float8_e4m3fn bytes (rows · row_elems) and the per-row float32
  // scales (rows), for the first min(max_rows, rows) rows, without dequantizing.
  Status DecodeFp8(std::span<const std::byte> region, CodecId id, const FieldGeometry& geometry,
                   uint64_t max_rows, std::span<uint8_t> fp8_dst, std::span<float> scales_dst);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace libshard::codec
