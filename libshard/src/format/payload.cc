#include "format/payload.h"

#include <zstd.h>

#include <cstring>

#include "format/bytes.h"
#include "libshard/sample.h"

namespace libshard::format {

Status ComputeLayout(const Schema& schema, std::span<const uint64_t> dims,
                     PayloadLayout* layout) {
  layout->offsets.assign(schema.fields.size(), 0);
  layout->sizes.assign(schema.fields.size(), 0);
  uint64_t off = 0;
  size_t d = 0;
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    const Field& field = schema.fields[f];
    if (d + field.rank > dims.size())
      return Status::InvalidArgument("field '" + field.name + "': dims missing");
    uint64_t elements = NumElements(dims.subspan(d, field.rank));
    d += field.rank;
    uint64_t nbytes = 0;
    if (elements == UINT64_MAX || !CheckedMul(elements, DTypeSize(field.dtype), &nbytes) ||
        nbytes > kMaxSampleBytes)
      return Status::InvalidArgument("field '" + field.name + "': tensor size overflows or exceeds " +
                                     std::to_string(kMaxSampleBytes) + " bytes");
    if (!CheckedAlignUp(off, kTensorAlignment, &off) || !CheckedAdd(off, nbytes, &off) ||
        off > kMaxSampleBytes)
      return Status::InvalidArgument("field '" + field.name + "': sample payload exceeds " +
                                     std::to_string(kMaxSampleBytes) + " bytes");
    layout->offsets[f] = off - nbytes;
    layout->sizes[f] = nbytes;
  }
  layout->raw_size = off;
  return Status::OK();
}

bool HasShuffledFields(const Schema& schema) {
  for (const Field& f : schema.fields)
    if (DTypeSize(f.dtype) == 2) return true;
  return false;
}

void ShufflePayload(const Schema& schema, const PayloadLayout& layout, const std::byte* src,
                    std::byte* dst, bool inverse) {
  std::memcpy(dst, src, layout.raw_size);
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    if (DTypeSize(schema.fields[f].dtype) != 2) continue;
    const uint64_t n = layout.sizes[f] / 2;
    const std::byte* s = src + layout.offsets[f];
    std::byte* t = dst + layout.offsets[f];
    if (!inverse) {
      for (uint64_t e = 0; e < n; ++e) {
        t[e] = s[2 * e];
        t[n + e] = s[2 * e + 1];
      }
    } else {
      for (uint64_t e = 0; e < n; ++e) {
        t[2 * e] = s[e];
        t[2 * e + 1] = s[n + e];
      }
    }
  }
}

uint64_t ZstdBound(uint64_t size) { return ZSTD_compressBound(size); }

Status ZstdCompress(std::span<const std::byte> src, std::span<std::byte> dst, int level,
                    uint64_t* frame_size) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  if (cctx == nullptr) return Status::ResourceExhausted("zstd: cannot create a context");
  // The content size goes into the frame header: readers require it (FORMAT.md §4.2).
  size_t r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
  if (!ZSTD_isError(r)) r = ZSTD_compress2(cctx, dst.data(), dst.size(), src.data(), src.size());
  ZSTD_freeCCtx(cctx);
  if (ZSTD_isError(r)) return Status::Internal(std::string("zstd compress: ") + ZSTD_getErrorName(r));
  *frame_size = r;
  return Status::OK();
}

Status ZstdDecompress(std::span<const std::byte> src, std::span<std::byte> dst) {
  unsigned long long content = ZSTD_getFrameContentSize(src.data(), src.size());
  if (content == ZSTD_CONTENTSIZE_ERROR)
    return Status::Corruption("not a zstd frame");
  if (content == ZSTD_CONTENTSIZE_UNKNOWN)
    return Status::Corruption("zstd frame without a content size");
  if (content != dst.size())
    return Status::Corruption("zstd frame content size " + std::to_string(content) +
                              " != raw_size " + std::to_string(dst.size()));
  size_t frame = ZSTD_findFrameCompressedSize(src.data(), src.size());
  if (ZSTD_isError(frame) || frame != src.size())
    return Status::Corruption("zstd frame does not span exactly the stored bytes");
  size_t r = ZSTD_decompress(dst.data(), dst.size(), src.data(), src.size());
  if (ZSTD_isError(r))
    return Status::Corruption(std::string("zstd: ") + ZSTD_getErrorName(r));
  if (r != dst.size())
    return Status::Corruption("zstd frame decoded to " + std::to_string(r) + " bytes, expected " +
                              std::to_string(dst.size()));
  return Status::OK();
}

}  // namespace libshard::format
