// Codec 1, zstd (FORMAT.md §4.3.3): byte-shuffled zstd per chunk, any dtype, lossless. A chunk
// has no fixed part; its coded plane is the chunk's byte planes (plane k holds byte k of every
// element) as one zstd frame, or as they are.
#include <cstring>

#include "codec/codec_table.h"

namespace libshard::codec {
namespace {

uint64_t CodedRowBytes(const FieldGeometry& g) { return g.row_elems * DTypeSize(g.dtype); }

Result<ChunkEntry> EncodeChunk(EncodeJob& job, const ChunkRows& c, std::vector<std::byte>* out) {
  // Locals, not c.n: the byte stores below may alias a struct member, which would be reloaded.
  const size_t w = DTypeSize(job.g.dtype), n = c.n;
  const uint8_t* chunk = job.src + c.row0 * job.g.row_elems * w;
  job.scratch.a.resize(n * w);
  auto* a = reinterpret_cast<uint8_t*>(job.scratch.a.data());
  if (w == 1) {
    std::memcpy(a, chunk, n);
  } else {
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k < w; ++k) a[k * n + i] = chunk[i * w + k];
  }
  const size_t coded_start = out->size();
  // Codec 1 is zstd by definition, whatever options.entropy says (§4.3.3).
  LIBSHARD_ASSIGN_OR_RETURN(uint8_t mode,
                            AppendCoded(job.scratch.cctx.get(), EntropyCoder::kZstd,
                                        job.options.level, job.scratch.a.data(), c.n * w, true,
                                        out));
  return ChunkEntry{.coded_size = static_cast<uint32_t>(out->size() - coded_start), .mode = mode};
}

Status DecodeChunk(DecodeScratch& s, const FieldGeometry& g, const ChunkView& c,
                   uint8_t* chunk_out) {
  // Locals, not c.n: the byte stores below may alias a struct member, which would be reloaded.
  const size_t w = DTypeSize(g.dtype), n = c.n;
  const size_t n_need = static_cast<size_t>(c.need * g.row_elems);
  const std::byte* plane = c.coded;
  if (c.mode != kModeStored) {
    std::byte* tmp = (w == 1 && c.need == c.rows) ? reinterpret_cast<std::byte*>(chunk_out)
                                                   : s.Scratch(n * w);
    LIBSHARD_RETURN_IF_ERROR(s.Unpack(c.mode, c.coded, c.coded_size, tmp, n * w));
    plane = tmp;
  }
  const auto* pl = reinterpret_cast<const uint8_t*>(plane);
  if (w == 1) {
    if (pl != chunk_out) std::memcpy(chunk_out, pl, n_need);
  } else {
    for (size_t i = 0; i < n_need; ++i)
      for (size_t k = 0; k < w; ++k) chunk_out[i * w + k] = pl[k * n + i];
  }
  return Status::OK();
}

}  // namespace

const CodecEntry kZstdCodec = {
    .id = CodecId::kZstd,
    .name = "zstd",
    .lossy = false,
    .has_region = true,
    .flags = 0,
    .coded_modes = 1 << kModeZstd,
    .accepts = AcceptsAny,
    .coded_row_bytes = CodedRowBytes,
    .fixed_row_bytes = NoBytes,
    .prepare = nullptr,
    .encode_chunk = EncodeChunk,
    .decode_chunk = DecodeChunk,
};

}  // namespace libshard::codec
