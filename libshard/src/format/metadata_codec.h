// Per-sample metadata encoding (FORMAT.md §3.4).
#pragma once

#include <span>
#include <string>

#include "libshard/sample.h"
#include "libshard/status.h"

namespace libshard::format {

// Appends the encoding of `metadata` to `out` (nothing for empty metadata). InvalidArgument when a
// key is empty, longer than kMaxNameBytes or duplicated, or the encoding exceeds kMaxMetadataBytes.
[[nodiscard]] Status EncodeMetadata(const Metadata& metadata, std::string* out);

// Decodes `bytes` (empty = no metadata). `out` may be null to only validate. The Status message
// says what is wrong and at which byte offset within the metadata; callers add file and sample.
[[nodiscard]] Status DecodeMetadata(std::span<const std::byte> bytes, Metadata* out);

}  // namespace libshard::format
