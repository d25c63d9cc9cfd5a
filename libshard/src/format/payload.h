// Raw payload layout and the stored-bytes filters (FORMAT.md §4.1, §4.2). Bytes only.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard::format {

struct PayloadLayout {
  std::vector<uint64_t> offsets;  // per field, within the raw payload
  std::vector<uint64_t> sizes;    // per field, bytes
  uint64_t raw_size = 0;
};

// The canonical layout (§4.1) of a sample whose dims are `dims` (Schema::DimsPerSample() values).
// Fails (InvalidArgument, naming the field) on overflow or when a size exceeds kMaxSampleBytes.
[[nodiscard]] Status ComputeLayout(const Schema& schema, std::span<const uint64_t> dims,
                                   PayloadLayout* layout);

// True when the schema has a field that the byte-shuffle filter applies to (2-byte dtypes).
bool HasShuffledFields(const Schema& schema);

// Byte-shuffle filter over a whole payload: for each 2-byte field, writes its byte planes from
// `src` to `dst` (forward) or back (inverse); other bytes are copied. src and dst must not overlap.
void ShufflePayload(const Schema& schema, const PayloadLayout& layout, const std::byte* src,
                    std::byte* dst, bool inverse);

// zstd: compresses `src` into `dst` (capacity ZstdBound(src.size())); returns the frame size.
uint64_t ZstdBound(uint64_t size);
[[nodiscard]] Status ZstdCompress(std::span<const std::byte> src, std::span<std::byte> dst,
                                  int level, uint64_t* frame_size);
// Decompresses exactly one frame spanning all of `src`, whose content size must equal dst.size().
[[nodiscard]] Status ZstdDecompress(std::span<const std::byte> src, std::span<std::byte> dst);

}  // namespace libshard::format
