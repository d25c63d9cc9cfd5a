// JSON helpers shared by the cache readers (readers/cache_source.h): reading a manifest under a
// size and nesting bound, and turning its members into dataset attributes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/attributes.h"
#include "libshard/status.h"
#include "readers/cache_dir.h"
#include "readers/cache_source.h"

namespace libshard::convert {

using CacheJson = nlohmann::ordered_json;

// The deepest nesting a cache manifest may have; deeper text is refused before parsing (one
// linear scan), so a hostile manifest cannot make the parser or the value's destructor recurse.
inline constexpr size_t kMaxCacheJsonNesting = 32;

// Parses `text` (named `what` in messages) as JSON: Corruption for invalid JSON, for nesting
// deeper than kMaxCacheJsonNesting, for an object with a duplicate key at any depth (a
// duplicate would silently collapse), and for a leading UTF-8 byte-order mark (the caches' own
// readers, Python's json, refuse one).
Result<CacheJson> ParseCacheJson(std::string_view text, const std::string& what);

// Reads and parses the JSON object `rel` of `dir`: ResourceExhausted past `max_bytes`, Corruption
// when it is not a JSON object (ParseCacheJson's checks too).
Result<CacheJson> ReadCacheJsonObject(const CacheDir& dir, const std::string& rel,
                                      uint64_t max_bytes);

// The members of `manifest` (an object) as attributes "<format>.<key>": a string stays a string,
// an integer that fits int64 stays an integer, any other value becomes its compact JSON text.
// Keys in `skip` are left out; a member whose key or text is too long for an attribute (256-byte
// keys, 64 KiB values; at most 255 members) goes to `omitted` instead. "source_format" is set to
// the format's name.
void ManifestAttributes(const CacheJson& manifest, SourceFormat format,
                        const std::vector<std::string_view>& skip, Attributes* attributes,
                        std::vector<std::string>* omitted);

// A member of `object` as a non-negative integer, or nullopt when absent or of another type.
std::optional<uint64_t> JsonUnsigned(const CacheJson& object, std::string_view key);

}  // namespace libshard::convert
