// The codec table (FORMAT.md §4.3.1), the raw codec and what the codecs share.
#include "codec/codec_table.h"

#include <iterator>
#include <string>

#include "codec/huffman.h"

namespace libshard::codec {

bool AcceptsAny(DType dtype) { return true; }
bool AcceptsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }
uint64_t NoBytes(const FieldGeometry& g) { return 0; }
uint64_t RowElemBytes(const FieldGeometry& g) { return g.row_elems; }

// Codec 0: the tensor's bytes as they are (v1 layout), no region header; Encode and Decode copy.
const CodecEntry kRawCodec = {
    .id = CodecId::kRaw,
    .name = "raw",
    .lossy = false,
    .has_region = false,
    .flags = 0,
    .coded_modes = 0,
    .accepts = AcceptsAny,
    .coded_row_bytes = NoBytes,
    .fixed_row_bytes = NoBytes,
    .prepare = nullptr,
    .encode_chunk = nullptr,
    .decode_chunk = nullptr,
};

const CodecEntry* FindCodec(CodecId id) {
  // Indexed by id: the numbers are part of the format.
  static constexpr const CodecEntry* kTable[] = {&kRawCodec,        &kZstdCodec,    &kPlanesCodec,
                                                 &kFp8Codec,        &kFp8EntropyCodec,
                                                 &kPlanes2Codec,    &kFp8PlanesCodec};
  static_assert(std::size(kTable) == kMaxCodecId + 1);
  const auto i = static_cast<uint8_t>(id);
  return i < std::size(kTable) ? kTable[i] : nullptr;
}

std::string_view CodecName(CodecId id) {
  const CodecEntry* e = FindCodec(id);
  return e != nullptr ? e->name : std::string_view();
}

bool IsLossy(CodecId id) {
  const CodecEntry* e = FindCodec(id);
  return e != nullptr && e->lossy;
}

bool CodecAccepts(CodecId id, DType dtype) {
  if (DTypeSize(dtype) == 0) return false;
  const CodecEntry* e = FindCodec(id);
  return e != nullptr && e->accepts(dtype);
}

Result<uint8_t> AppendCoded(ZSTD_CCtx* cctx, EntropyCoder coder, int level, const std::byte* src,
                            size_t n, bool allow_coding, std::vector<std::byte>* out) {
  const size_t start = out->size();
  if (allow_coding && n > 0 && coder == EntropyCoder::kHuffman) {
    huffman::Encode(reinterpret_cast<const uint8_t*>(src), n, out);
    if (out->size() - start < n) return kModeHuffman;
    out->resize(start);
  } else if (allow_coding && n > 0) {
    const size_t bound = ZSTD_compressBound(n);
    out->resize(start + bound);
    ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
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

Status DecodeScratch::Unpack(uint8_t mode, const std::byte* coded, size_t coded_size,
                             std::byte* dst, size_t n) {
  if (mode == kModeHuffman)
    return huffman::Decode(coded, coded_size, reinterpret_cast<uint8_t*>(dst), n);
  return Unzstd(coded, coded_size, dst, n);
}

Status DecodeScratch::Unzstd(const std::byte* coded, size_t coded_size, std::byte* dst,
                             size_t n) {
  if (!dctx_) return Status::ResourceExhausted("cannot create a zstd decompression context");
  const unsigned long long content = ZSTD_getFrameContentSize(coded, coded_size);
  if (content != n)
    return Status::Corruption("zstd frame does not declare its " + std::to_string(n) +
                              "-byte content");
  if (ZSTD_findFrameCompressedSize(coded, coded_size) != coded_size)
    return Status::Corruption("zstd frame does not span its " + std::to_string(coded_size) +
                              " coded bytes");
  const size_t got = ZSTD_decompressDCtx(dctx_.get(), dst, n, coded, coded_size);
  if (ZSTD_isError(got)) return Status::Corruption(std::string("zstd: ") + ZSTD_getErrorName(got));
  if (got != n)
    return Status::Corruption("zstd frame decoded to " + std::to_string(got) +
                              " bytes; expected " + std::to_string(n));
  return Status::OK();
}

Result<const uint8_t*> DecodeScratch::BytePlane(const ChunkView& c) {
  if (c.mode == kModeStored) return reinterpret_cast<const uint8_t*>(c.coded);
  std::byte* tmp = Scratch(c.n);
  LIBSHARD_RETURN_IF_ERROR(Unpack(c.mode, c.coded, c.coded_size, tmp, c.n));
  return reinterpret_cast<const uint8_t*>(tmp);
}

}  // namespace libshard::codec
