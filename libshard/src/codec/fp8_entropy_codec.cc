// Codec 4, fp8-entropy (FORMAT.md §4.3.5): fp8 (codec 3) with the codes less 8 · the channel
// base, entropy-coded (zstd or Huffman); lossy. Chunks as fp8_codec.cc writes and reads them.
#include "codec/codec_table.h"

namespace libshard::codec {
namespace {

uint64_t ScaleBytes(const FieldGeometry& g) { return kFp8ScaleBytes; }

// The codes of every row, then the channel base: the rounded mean over the rows of each
// channel's 4 exponent bits, and bit 7 set when most of the channel's values are negative.
Status Prepare(EncodeJob& job) {
  LIBSHARD_RETURN_IF_ERROR(PrepareFp8(job));
  if (!job.channel_base) return Status::OK();
  const FieldGeometry& g = job.g;
  std::vector<uint64_t> sums(g.row_elems, 0), negatives(g.row_elems, 0);
  for (uint64_t r = 0; r < g.rows; ++r) {
    const uint8_t* row = job.codes + r * g.row_elems;
    for (uint64_t c = 0; c < g.row_elems; ++c) {
      sums[c] += (row[c] >> 3) & 0xF;
      negatives[c] += row[c] >> 7;
    }
  }
  job.base.resize(g.row_elems);
  for (uint64_t c = 0; c < g.row_elems; ++c)
    job.base[c] = static_cast<uint8_t>((sums[c] + g.rows / 2) / g.rows |
                                       (2 * negatives[c] > g.rows ? 0x80 : 0));
  return Status::OK();
}

Result<ChunkEntry> EncodeChunk(EncodeJob& job, const ChunkRows& c, std::vector<std::byte>* out) {
  return EncodeFp8Chunk(job, c, /*coded=*/true, out);
}

}  // namespace

const CodecEntry kFp8EntropyCodec = {
    .id = CodecId::kFp8Entropy,
    .name = "fp8-entropy",
    .lossy = true,
    .has_region = true,
    .flags = kFlagChannelBase,
    .coded_modes = (1 << kModeZstd) | (1 << kModeHuffman),
    .accepts = AcceptsHalf,
    .coded_row_bytes = RowElemBytes,
    .fixed_row_bytes = ScaleBytes,
    .prepare = Prepare,
    .encode_chunk = EncodeChunk,
    .decode_chunk = DecodeFp8Chunk,
    .decode_codes = DecodeFp8CodesChunk,
};

}  // namespace libshard::codec
