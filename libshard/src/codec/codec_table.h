// The codec table (FORMAT.md §4.3.1): one entry per codec id, each codec in its own file
// (raw and the table in codec_table.cc, zstd_codec.cc, planes_codec.cc, fp8_codec.cc,
// fp8_entropy_codec.cc, planes2_codec.cc, fp8_planes_codec.cc). A codec says which dtypes it takes, how many fixed and coded bytes a row
// holds in a chunk, which chunk modes and header flags it allows, and how to encode and decode
// one chunk; the chunk walker (chunk_walker.{h,cc}) does everything else (header, chunk table,
// channel base table, bounds, error messages) once for all of them. Internal to codec/.
#pragma once

#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "codec/field_codec.h"
#include "codec/region.h"
#include "libshard/dtype.h"
#include "libshard/status.h"

namespace libshard::codec {

struct ZstdCCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct ZstdDCtxDeleter {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};

// One thread's encoder state: a zstd context and the plane buffers of one chunk (a) and of the
// whole tensor's fp8 codes (b).
struct EncoderScratch {
  std::unique_ptr<ZSTD_CCtx, ZstdCCtxDeleter> cctx{ZSTD_createCCtx()};
  std::vector<std::byte> a;
  std::vector<std::byte> b;
};

// One region being encoded: what the walker knows and what a codec's `prepare` computes for its
// chunks (fp8: the codes and scales of every row; planes and fp8-entropy: the channel base).
struct EncodeJob {
  const FieldGeometry& g;
  const EncodeOptions& options;
  const uint8_t* src;      // g.elements() elements of g.dtype
  EncoderScratch& scratch;
  bool channel_base = false;   // the walker's decision (flag allowed, options, row_elems)
  std::vector<uint8_t> base;   // row_elems bytes when channel_base (set by prepare)
  std::vector<float> scales;   // fp8 codecs: g.rows scales (set by prepare)
  const uint8_t* codes = nullptr;  // fp8 codecs: g.elements() codes (set by prepare)
};

// The rows of one chunk: rows [row0, row0 + rows) of the tensor, n = rows · row_elems elements.
struct ChunkRows {
  uint64_t index = 0;
  uint64_t row0 = 0;
  uint64_t rows = 0;
  size_t n = 0;
};

// One chunk of a checked region, as the walker hands it to a decoder.
struct ChunkView {
  uint64_t index = 0;
  uint64_t row0 = 0;
  uint64_t rows = 0;    // rows in the chunk
  uint64_t need = 0;    // of them, the rows the caller wants (a prefix)
  size_t n = 0;         // rows · row_elems
  uint8_t mode = kModeStored;
  const std::byte* fixed = nullptr;  // the fixed part: rows · fixed_row_bytes
  const std::byte* coded = nullptr;  // the coded plane: coded_size bytes
  size_t coded_size = 0;
  const uint8_t* base = nullptr;     // the channel base table, or null
};

// A decoder's reusable state: a zstd context and a scratch buffer grown to at most one chunk's
// plane (which the geometry bounds).
class DecodeScratch {
 public:
  // Decodes a mode 1 or 2 plane of `coded_size` bytes into exactly n bytes at dst. Errors do not
  // say where: the walker adds that (building the text only on an error).
  Status Unpack(uint8_t mode, const std::byte* coded, size_t coded_size, std::byte* dst, size_t n);
  std::byte* Scratch(size_t n) {
    if (scratch_.size() < n) scratch_.resize(n);
    return scratch_.data();
  }
  // The chunk's one-byte plane (n bytes): as stored, or decoded (Huffman or zstd) into the
  // scratch, which a chunk (at most ~1 MiB of plane) keeps in the core's cache for the interleave
  // or dequantization that reads it next. (Decoding into the upper half of the chunk's own output
  // instead sent the plane through memory twice more: measured, the interleave then cost half as
  // much as the Huffman decode.)
  Result<const uint8_t*> BytePlane(const ChunkView& c);

 private:
  Status Unzstd(const std::byte* coded, size_t coded_size, std::byte* dst, size_t n);
  std::unique_ptr<ZSTD_DCtx, ZstdDCtxDeleter> dctx_{ZSTD_createDCtx()};
  std::vector<std::byte> scratch_;
};

struct CodecEntry {
  CodecId id;
  std::string_view name;
  bool lossy;
  bool has_region;      // false for raw: the tensor's bytes as they are, no header
  uint8_t flags;        // header flags the codec may set
  uint8_t coded_modes;  // bit m set: chunk mode m (besides stored) is allowed
  bool (*accepts)(DType dtype);
  // Bytes of a chunk's coded plane per row, and of its fixed part per row (§4.3.2 table).
  uint64_t (*coded_row_bytes)(const FieldGeometry& g);
  uint64_t (*fixed_row_bytes)(const FieldGeometry& g);
  // Before the first chunk: fills the job's base (when channel_base), scales and codes. May be
  // null.
  Status (*prepare)(EncodeJob& job);
  // Appends the chunk's fixed part and then its coded plane to `out`; returns the chunk's table
  // entry (the coded plane's size and mode).
  Result<ChunkEntry> (*encode_chunk)(EncodeJob& job, const ChunkRows& c, std::vector<std::byte>* out);
  // Decodes the chunk's first c.need rows into chunk_out (c.need · row_elems elements of g.dtype).
  Status (*decode_chunk)(DecodeScratch& s, const FieldGeometry& g, const ChunkView& c,
                         uint8_t* chunk_out);
  // fp8 codecs (Decoder::DecodeFp8): the chunk's first c.need rows' scales (scales_out) and
  // codes (q_out, c.need · row_elems bytes), not dequantized; null for the others.
  Status (*decode_codes)(DecodeScratch& s, const FieldGeometry& g, const ChunkView& c,
                         uint8_t* q_out, float* scales_out) = nullptr;
};

// The entry of `id`; null for an id no codec has.
const CodecEntry* FindCodec(CodecId id);

// The codecs' entries (one file each).
extern const CodecEntry kRawCodec;
extern const CodecEntry kZstdCodec;
extern const CodecEntry kPlanesCodec;
extern const CodecEntry kFp8Codec;
extern const CodecEntry kFp8EntropyCodec;
extern const CodecEntry kPlanes2Codec;
extern const CodecEntry kFp8PlanesCodec;

// Shared by the codecs.
bool AcceptsAny(DType dtype);
bool AcceptsHalf(DType dtype);  // bfloat16, float16
uint64_t NoBytes(const FieldGeometry& g);
uint64_t RowElemBytes(const FieldGeometry& g);  // one byte per element
// Appends the coded plane of `src` to `out`: coded with `coder` (Huffman, mode 2, or zstd at
// `level`, mode 1) when that is strictly smaller, else as it is (mode 0). Returns the mode.
Result<uint8_t> AppendCoded(ZSTD_CCtx* cctx, EntropyCoder coder, int level, const std::byte* src,
                            size_t n, bool allow_coding, std::vector<std::byte>* out);
// The fp8 codecs (fp8_codec.cc): quantizes every row into job.scales and the scratch's codes.
Status PrepareFp8(EncodeJob& job);
// The fp8 codecs' chunk: fixed part the rows' float32 scales, coded plane the codes less the
// channel base, entropy-coded when `coded` (fp8-entropy).
Result<ChunkEntry> EncodeFp8Chunk(EncodeJob& job, const ChunkRows& c, bool coded,
                                  std::vector<std::byte>* out);
Status DecodeFp8Chunk(DecodeScratch& s, const FieldGeometry& g, const ChunkView& c,
                      uint8_t* chunk_out);
// Decoder::DecodeFp8's chunk: the first c.need rows' scales (scales_out) and codes with the
// channel base undone (q_out, c.need · row_elems bytes), not dequantized.
Status DecodeFp8CodesChunk(DecodeScratch& s, const FieldGeometry& g, const ChunkView& c,
                           uint8_t* q_out, float* scales_out);

}  // namespace libshard::codec
